"""``--replay-parameters``: its grammar, defaults and checks (the memory its replays need is impala/replay.py's).

The flag is parsed and checked once, up front, with the other flags (``runtime/config.py``); IMPALA's learner
reads the same parsed specs (``impala/replay.py`` holds the buffers and their sampling). Kinds and keys are
elite_buffer_vtrace's (its README and ``parameter_schema``).
"""

import json
import math

from core.errors import BadInput

DEFAULT_REPLAY_PARAMETERS = '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'
REPLAY_TYPES = ("queue", "standard", "custom")
DIST_FUNCTIONS = ("ln_norm", "cos_dist", "kl_div")
SAMPLE_STRATEGIES = ("elite_sampling", "attentive_sampling")
INSERT_STRATEGIES = ("elite_insertion",)
ELITE_STRATEGIES = ("strategy1", "strategy2", "strategy3", "strategy4")
# lambda 6: what elite_buffer_vtrace's README and experiments run elite sampling with (its schema's default of 1
# ranks exactly the picks: sampling stays uniform); lambda only matters with a sample_strategy.
# score_steps 5 (ours): rank by each unroll's first 5 steps, a quarter of the scoring forwards of a 20-step unroll;
# on Pong it learned as well as scoring every step (3 seeds each) at 0.7-0.8x of the standard replay's frames/s
# instead of 0.4x (docs/results/replay.md); where unrolls are shorter, every step
DEFAULT_SCORE_STEPS = 5
CUSTOM_DEFAULTS = {"dist_function": None, "p": 2, "sample_strategy": None, "insert_strategy": None,
                   "lambda_batch_multiplier": 6, "alfa_annealing_factor": 1.0, "elite_sampling_strategy": "strategy3",
                   "elite_batch_size": 20, "score_steps": DEFAULT_SCORE_STEPS}
# A custom replay's keys that only another of its settings reads: key -> (what reads it, whether the spec has it)
READ_ONLY_WITH = {
    "dist_function": ("a sample_strategy or an insert_strategy (without either, a custom replay is a standard one)",
                      lambda spec: spec["sample_strategy"] or spec["insert_strategy"]),
    "p": ('"dist_function": "ln_norm"', lambda spec: spec["dist_function"] == "ln_norm"),
    "lambda_batch_multiplier": ("a sample_strategy", lambda spec: spec["sample_strategy"]),
    "alfa_annealing_factor": ("a sample_strategy", lambda spec: spec["sample_strategy"]),
    "elite_sampling_strategy": ("a sample_strategy", lambda spec: spec["sample_strategy"]),
    "elite_batch_size": ('"insert_strategy": "elite_insertion"',
                         lambda spec: spec["insert_strategy"] == "elite_insertion"),
}
RATIO_TOLERANCE = 1e-6  # ratio x B is a whole number within this (0.1 x 10 is 1.0000000000000002 in floats)


def candidate_count(lam: float, count: int) -> int:
    """Candidates ranked for ``count`` picks at ``lam`` candidates per pick (never fewer than the picks)."""
    return max(count, int(lam * count))



# ---------------------------------------------------------------------------------------------------------------
# --replay-parameters


def entry_error(index, entry, key, message):
    kind = entry.get("type") if isinstance(entry, dict) and isinstance(entry.get("type"), str) else "?"
    where = f"--replay-parameters entry {index + 1} ({kind})"
    return BadInput(f"{where}: {key} {message}" if key else f"{where}: {message}")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _check_entry(index, entry):
    if not isinstance(entry, dict):
        raise entry_error(index, entry, None, f"must be an object like {{\"type\": \"standard\", \"capacity\": 1000, "
                                       f"\"sample_ratio\": 0.5}}, got {json.dumps(entry)}")
    for key in ("type", "capacity", "sample_ratio"):
        if key not in entry:
            raise entry_error(index, entry, None, f"key '{key}' is missing")
    kind = entry["type"]
    if kind not in REPLAY_TYPES:
        raise entry_error(index, entry, "'type'", f"must be one of {', '.join(REPLAY_TYPES)}, got {json.dumps(kind)}")
    allowed = {"type", "capacity", "sample_ratio"} | (set(CUSTOM_DEFAULTS) if kind == "custom" else set())
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise entry_error(index, entry, None, f"unknown key '{unknown[0]}' (a {kind} replay takes {', '.join(sorted(allowed))})")
    if not _is_int(entry["capacity"]) or entry["capacity"] < 1:
        raise entry_error(index, entry, "'capacity'", f"must be a whole number >= 1, got {json.dumps(entry['capacity'])}")
    if not _is_number(entry["sample_ratio"]) or not 0 < entry["sample_ratio"] <= 1:
        raise entry_error(index, entry, "'sample_ratio'", f"must be a number in (0, 1], got {json.dumps(entry['sample_ratio'])}")
    if kind == "queue" and entry["capacity"] != 1:
        raise entry_error(index, entry, "'capacity'", f"of the queue must be 1 (the queue is the actors' fresh unrolls; "
                                              f"--num-buffers sizes it), got {entry['capacity']}")
    spec = dict(entry)
    if kind == "custom":
        spec = {**CUSTOM_DEFAULTS, **entry}
        _check_custom(index, spec)
    return spec


def _check_custom(index, spec):
    if spec["sample_strategy"] is None and spec["insert_strategy"] is None:
        raise entry_error(index, spec, None, 'a custom replay needs a "sample_strategy" or an "insert_strategy" '
                                             '(without either it is "type": "standard")')
    if spec["dist_function"] is None:
        raise entry_error(index, spec, None, f"key 'dist_function' is missing ({', '.join(DIST_FUNCTIONS)})")
    choices = {"dist_function": DIST_FUNCTIONS, "sample_strategy": SAMPLE_STRATEGIES,
               "insert_strategy": INSERT_STRATEGIES, "elite_sampling_strategy": ELITE_STRATEGIES}
    for key, allowed in choices.items():
        optional = key in ("sample_strategy", "insert_strategy")
        if spec[key] not in allowed and not (optional and spec[key] is None):
            raise entry_error(index, spec, f"'{key}'", f"must be one of {', '.join(allowed)}, got {json.dumps(spec[key])}")
    if not _is_int(spec["p"]) or spec["p"] < 1:
        raise entry_error(index, spec, "'p'", f"must be a whole number >= 1, got {json.dumps(spec['p'])}")
    if not _is_number(spec["lambda_batch_multiplier"]) or spec["lambda_batch_multiplier"] < 1:
        raise entry_error(index, spec, "'lambda_batch_multiplier'",
                   f"must be a number >= 1, got {json.dumps(spec['lambda_batch_multiplier'])}")
    if not _is_number(spec["alfa_annealing_factor"]) or not spec["alfa_annealing_factor"] > 0:
        raise entry_error(index, spec, "'alfa_annealing_factor'",
                   f"must be a number > 0, got {json.dumps(spec['alfa_annealing_factor'])}")
    size = spec["elite_batch_size"]
    if not _is_int(size) or size < 1:
        raise entry_error(index, spec, "'elite_batch_size'", f"must be a whole number >= 1, got {json.dumps(size)}")
    steps = spec["score_steps"]
    if steps is not None and (not _is_int(steps) or steps < 1):
        raise entry_error(index, spec, "'score_steps'", f"must be a whole number >= 1 (or null: every step), got "
                                                        f"{json.dumps(steps)}")
    if spec["insert_strategy"] == "elite_insertion" and size > spec["capacity"]:
        raise entry_error(index, spec, "'elite_batch_size'", f"{size} is above the capacity {spec['capacity']}")


def _check_ranked_sampling(index, spec):
    """A sample_strategy ranks more candidates than it picks, or it would pick every candidate: uniform sampling
    under another name, with the distances never computed."""
    if spec["type"] != "custom" or not spec["sample_strategy"]:
        return
    lam, count = spec["lambda_batch_multiplier"], spec["count"]
    if candidate_count(lam, count) <= count:
        raise entry_error(index, spec, "'lambda_batch_multiplier'",
                   f"{lam:g} x {count} picks gives {candidate_count(lam, count)} candidates: {spec['sample_strategy']} "
                   f"needs more candidates than picks, at least {(count + 1) / count:g} (default 6)")


def replay_specs(text: str, batch_size: int, unroll_length: int | None = None) -> list[dict]:
    """Parse and check ``--replay-parameters``; returns one dict per entry, custom defaults filled in and
    ``count`` (unrolls per batch) added. Raises ValueError with one line naming the entry and the key.
    ``unroll_length`` (``--num-steps``), where given, bounds ``score_steps``: a value the entry gives above it is
    refused, the default is cut to it (every step)."""
    try:
        entries = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise BadInput(f"--replay-parameters is not valid JSON ({exc})") from None
    if not isinstance(entries, list) or not entries:
        raise BadInput(f"--replay-parameters must be a non-empty JSON list of replays, got {text!r}")
    specs = [_check_entry(i, entry) for i, entry in enumerate(entries)]
    for i, (entry, spec) in enumerate(zip(entries, specs)):
        steps = spec.get("score_steps")
        if unroll_length is None or steps is None or steps <= unroll_length:
            continue
        if "score_steps" in entry:
            raise entry_error(i, spec, "'score_steps'", f"{steps} is above --num-steps {unroll_length}, the steps "
                                                        f"an unroll has")
        spec["score_steps"] = unroll_length
    queues = [i for i, spec in enumerate(specs) if spec["type"] == "queue"]
    if not queues:
        raise BadInput('--replay-parameters has no on-policy queue: add {"type": "queue", "capacity": 1, '
                         '"sample_ratio": r} (learning purely from replay is unstable, LASER Proposition 3)')
    if len(queues) > 1:
        raise entry_error(queues[1], specs[queues[1]], "'type'", "queue appears twice: there is one on-policy queue")
    total = 0
    for i, spec in enumerate(specs):
        count = spec["sample_ratio"] * batch_size
        if abs(count - round(count)) > RATIO_TOLERANCE:
            raise entry_error(i, spec, "'sample_ratio'", f"{spec['sample_ratio']} x --batch-size {batch_size} = {count:g} "
                                                 f"is not a whole number of unrolls")
        spec["count"] = int(round(count))
        if spec["count"] < 1:
            raise entry_error(i, spec, "'sample_ratio'", f"{spec['sample_ratio']} x --batch-size {batch_size} = {count:g}: "
                                                 f"every entry gives at least one unroll per batch")
        if spec["type"] != "queue" and spec["capacity"] < spec["count"]:  # ready() could never be true
            raise entry_error(i, spec, "'capacity'", f"{spec['capacity']} is below the {spec['count']} unrolls it gives "
                                                     f"each batch (sample_ratio x --batch-size): it would never be "
                                                     f"sampled")
        _check_ranked_sampling(i, spec)
        total += spec["count"]
    if total != batch_size:
        raise BadInput(f"--replay-parameters: the entries' sample_ratio x --batch-size add up to {total} unrolls, "
                         f"not --batch-size {batch_size} (ratios must sum to 1)")
    return specs


def check_keys_read(text: str) -> None:
    """Refuse a key given in ``--replay-parameters`` (checked by ``replay_specs``) that no other setting of its entry
    reads: it would be recorded and change nothing. Only the keys the user wrote are judged, not the defaults."""
    for index, entry in enumerate(json.loads(text)):
        spec = {**CUSTOM_DEFAULTS, **entry}
        for key, (reader, read) in READ_ONLY_WITH.items():
            if key in entry and not read(spec):
                raise entry_error(index, entry, f"'{key}'", f"needs {reader}, else it changes nothing")


def needs_features(spec: dict) -> bool:
    """Whether a replay ranks by the network's features (stored by the actors), rather than by logits or not at all."""
    ranked = spec.get("sample_strategy") or spec.get("insert_strategy")
    return spec["type"] == "custom" and bool(ranked) and spec["dist_function"] != "kl_div"
