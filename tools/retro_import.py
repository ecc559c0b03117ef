"""Import retro game ROMs: stable-retro's games and a3g's own integrations (Super Mario Kart).

    python -m tools.retro_import DIR [DIR ...]

Does what stable-retro's importer (``python -m stable_retro.import DIR``) does, with a3g's
``envs/retro_integrations/`` folder added to the integrations it matches ROM files against (by SHA-1, archives
included), so a ROM of one of a3g's games is copied into ``envs/retro_integrations/<game>/rom.<ext>`` (ignored by
git: ROMs are never committed). Unlike stable-retro's, it writes each ROM whole or not at all (a temporary file
renamed into place: a full disk or Ctrl-C mid-write left a truncated ROM in place of a good one, which the game's
check then accepted), and it leaves a ROM that is already there as it is. Exit 2 when a DIR is not a folder, a ROM
cannot be written, or no file in the folders is the ROM of a game either knows; 130 after Ctrl-C.
"""

import json
import os
import sys
import zipfile
from typing import BinaryIO, Callable

from core.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_SIGINT
from core.files import atomic_write_bytes
from envs import retro_env

PROG = "python -m tools.retro_import"  # how the command is run, for its messages


def main(argv: list[str] | None = None) -> int:
    folders = sys.argv[1:] if argv is None else argv
    if not folders or any(f.startswith("-") for f in folders):
        print("usage: python -m tools.retro_import DIR [DIR ...]  (folders holding your ROM files)", file=sys.stderr)
        return EXIT_BAD_INPUT
    missing = [f for f in folders if not os.path.isdir(f)]
    if missing:
        print(f"{PROG}: error: {missing[0]} is not a folder", file=sys.stderr)
        return EXIT_BAD_INPUT
    retro_env.retro()  # registers a3g's integrations with stable-retro
    import stable_retro.data

    known = stable_retro.data.get_known_hashes()  # SHA-1 -> (game, ROM extension, integration folder)
    imported = []

    def save_if_known(name: str, f: BinaryIO) -> None:
        try:
            data, sha = stable_retro.data.groom_rom(name, f)
        except (OSError, ValueError):  # not a ROM it can read (too big, a bad header)
            return
        if sha in known:
            game, ext, integrations = known[sha]
            print("Importing", game, flush=True)
            install(os.path.join(integrations, game), f"rom{ext}", data)
            imported.append(game)

    try:
        for folder in folders:
            for root, _, files in os.walk(folder):
                for name in sorted(files):
                    if not os.path.isfile(os.path.join(root, name)):  # a socket or a pipe (opening one would wait)
                        continue
                    with open(os.path.join(root, name), "rb") as f:
                        save_if_known(name, f)  # an archive's own SHA-1 first: some games' rom.sha names one
                        if name.lower().endswith(".zip") and zipfile.is_zipfile(f):
                            f.seek(0)
                            read_archive(f, save_if_known)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted after {len(imported)} game(s); every ROM written is whole", file=sys.stderr)
        return EXIT_SIGINT
    except OSError as exc:  # a ROM folder it cannot write (a read-only install), a file it cannot read
        print(f"{PROG}: error: {exc.filename or 'a file'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RuntimeError, NotImplementedError, zipfile.BadZipFile) as exc:  # what zipfile raises on an archive
        # it cannot open: a password, a compression method Python lacks, a damaged file
        print(f"{PROG}: error: an archive in {', '.join(folders)} cannot be read ({exc}): unpack it and import the "
              f"folder of its files", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"Imported {len(imported)} games")
    if not imported:
        print(f"{PROG}: error: no file in {', '.join(folders)} is the ROM of a game stable-retro or a3g knows "
              f"(matched by SHA-1: a ROM dumped or patched differently does not match)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def read_archive(f: BinaryIO, found: Callable[[str, BinaryIO], None]) -> None:
    """Each file of a zip archive (and of the archives inside it) through ``found(name, file)``."""
    with zipfile.ZipFile(f) as archive:
        for entry in archive.infolist():
            if entry.is_dir():
                continue
            with archive.open(entry) as inner:
                if entry.filename.lower().endswith(".zip"):
                    read_archive(inner, found)
                else:
                    found(entry.filename, inner)


def install(game_path: str, name: str, data: bytes) -> None:
    """Write the ROM as ``name`` in the game's integration folder, and under the original name its metadata gives
    (FBNeo's games, as stable-retro's importer does); a file that already holds these bytes is left as it is."""
    names = [name]
    try:
        with open(os.path.join(game_path, "metadata.json")) as f:
            original = json.load(f).get("original_rom_name")
        if isinstance(original, str) and original:
            names.append(original)
    except (OSError, ValueError, AttributeError):
        pass
    for target in names:
        path = os.path.join(game_path, target)
        try:
            with open(path, "rb") as f:
                if f.read(len(data) + 1) == data:
                    continue
        except OSError:
            pass
        try:
            atomic_write_bytes(path, data)
        except OSError as exc:  # a failed write names no file: this one
            raise OSError(exc.errno, exc.strerror or str(exc), exc.filename or path) from None


if __name__ == "__main__":
    sys.exit(main())
