"""The layout draws the architecture: the root holds the design's A3G files, and imports run one way, from the
entry points down to the foundations; IMPALA never imports A3G's worker or evaluator."""

import ast
import os
import re

from conftest import ROOT

ROOT_MODULES = {"main.py", "gym_eval.py", "train.py", "test.py", "model.py", "shared_optim.py"}
PACKAGES = ("core", "envs", "runtime", "impala", "tools")
# A module's layer; a module may import its own layer or a lower one (a larger number), never a higher one.
LAYERS = {"main": 0, "gym_eval": 0, "tools": 0,  # entry points
          "train": 1, "test": 1, "impala": 1,  # algorithms
          "runtime": 2,  # the run's machinery
          "model": 3, "shared_optim": 3, "core": 3, "envs": 3}  # foundations
A3G_ONLY = {"train", "test"}  # A3G's worker and evaluator entry: imported by main.py and A3G's own code only


def project_modules():
    """(dotted name, path) of every module of the project, tests and docs aside."""
    for name in ROOT_MODULES:
        yield name[:-3], os.path.join(ROOT, name)
    for package in PACKAGES:
        for file in sorted(os.listdir(os.path.join(ROOT, package))):
            if file.endswith(".py"):
                yield f"{package}.{file[:-3]}", os.path.join(ROOT, package, file)


def imports(path):
    """The project's top-level names that ``path`` imports, anywhere in the file (imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found & set(LAYERS)


def test_the_root_holds_the_design_files_and_folders_only():
    modules = {f for f in os.listdir(ROOT) if f.endswith(".py")}
    assert modules == ROOT_MODULES
    data = {f for f in os.listdir(ROOT) if f.endswith(".json")}
    assert not data, f"data files belong in the folder of what reads them: {data}"


def test_imports_run_from_the_entry_points_down_to_the_foundations():
    upward = []
    for name, path in project_modules():
        layer = LAYERS[name.split(".")[0]]
        for imported in imports(path):
            if LAYERS[imported] < layer:
                upward.append(f"{name} (layer {layer}) imports {imported} (layer {LAYERS[imported]})")
    assert not upward, upward


def test_only_main_and_a3g_import_the_a3g_worker_and_evaluator():
    allowed = {"main", "train", "test", "tools.bench"}  # bench runs A3G's roles as main.py does
    offenders = [name for name, path in project_modules() if name not in allowed and imports(path) & A3G_ONLY]
    assert not offenders, offenders


def test_one_exit_code_table_one_bad_input_error_one_parser():
    """Exit codes and the bad-input error are defined in core/errors.py alone, the commands' parser in core/cli.py
    alone, and every command uses it."""
    for name, path in project_modules():
        text = open(path).read()
        if name != "core.errors":
            assert not re.search(r"^EXIT_\w+\s*=|^EXIT_\w+,.*=", text, re.M), f"{name} defines exit codes"
            assert not re.search(r"^class \w+\(ValueError\)", text, re.M), f"{name} defines a bad-input error"
        if name != "core.cli":
            assert not re.search(r"ArgumentParser\(", text), f"{name} makes a parser of its own"
