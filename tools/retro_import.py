"""Import retro game ROMs: stable-retro's games and a3g's own integrations (Super Mario Kart).

    python -m tools.retro_import DIR [DIR ...]

Runs stable-retro's importer (``python -m stable_retro.import DIR``) with a3g's ``envs/retro_integrations/`` folder
added to the integrations it matches ROM files against (by SHA-1), so a ROM of one of a3g's games is copied into
``envs/retro_integrations/<game>/rom.<ext>`` (ignored by git: ROMs are never committed). Exit 2 when a DIR is not a
folder, or when no file in the folders is the ROM of a game either knows.
"""

import contextlib
import os
import sys
import zipfile

from envs import retro_env

PROG = "python -m tools.retro_import"  # how the command is run, for its messages


def main(argv: list[str] | None = None) -> int:
    folders = sys.argv[1:] if argv is None else argv
    if not folders or any(f.startswith("-") for f in folders):
        print("usage: python -m tools.retro_import DIR [DIR ...]  (folders holding your ROM files)", file=sys.stderr)
        return 2
    missing = [f for f in folders if not os.path.isdir(f)]
    if missing:
        print(f"{PROG}: error: {missing[0]} is not a folder", file=sys.stderr)
        return 2
    retro_env.retro()  # registers a3g's integrations with stable-retro
    from stable_retro.scripts.import_path import main as stable_retro_import

    sys.argv = ["retro_import.py", *folders]  # stable-retro's importer reads its folders from sys.argv
    shown = CountingOutput(sys.stdout)
    try:
        with contextlib.redirect_stdout(shown):
            stable_retro_import()
    except OSError as exc:  # a ROM folder it cannot write (a read-only install), a file it cannot read
        print(f"{PROG}: error: {exc.filename or 'a file'}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (RuntimeError, NotImplementedError, zipfile.BadZipFile) as exc:  # what zipfile raises on an archive
        # it cannot open: a password, a compression method Python lacks, a damaged file
        print(f"{PROG}: error: an archive in {', '.join(folders)} cannot be read ({exc}): unpack it and import the "
              f"folder of its files", file=sys.stderr)
        return 2
    if not shown.imported:
        print(f"{PROG}: error: no file in {', '.join(folders)} is the ROM of a game stable-retro or a3g knows "
              f"(matched by SHA-1: a ROM dumped or patched differently does not match)", file=sys.stderr)
        return 2
    return 0


class CountingOutput:
    """Passes the importer's lines through as it prints them, counting its "Importing <game>" lines."""

    def __init__(self, out):
        self.out, self.imported, self.line = out, 0, ""

    def write(self, text: str) -> int:
        self.line += text
        *whole, self.line = self.line.split("\n")
        self.imported += sum(line.startswith("Importing ") for line in whole)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


if __name__ == "__main__":
    sys.exit(main())
