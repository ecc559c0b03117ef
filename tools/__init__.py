"""Tools around training, run from the repository's root as ``python -m tools.<name>``: bench (frames/s), sweep
(seeds of one command, time to score), soak (a long run under faults), plot, export_model, and the retro set-up
(retro_import, retro_state, save_states)."""
