"""Foundations that every layer above may use and that import nothing of the project's: the return math, playing
a game, the exit codes and bad-input error of every command, the one-line argument parser, hardware checks, file
writes that are never half done, logs and clocks."""
