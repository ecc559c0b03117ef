"""Environments, a foundation of every algorithm: the families (Atari, classic control, stable-retro console games,
Mario Kart's rules), their preprocessing and data files (``atari.json``'s crops, ``retro_games.json``, the retro
integrations), a worker's batch of environments, and recordings of games."""
