"""IMPALA on Ray (``--backend ray``): the same roles as impala/shm.py's shared-memory backend, with the actors as Ray
actors, so that they can run on other machines.

What stays on the machine that runs main.py: the shared model and optimizer, ``RunState``, the run directory and
checkpoints (main.py), the evaluator (runtime/evaluator.py: it reads the shared model) and the
**learner**, a supervisor role like the shared-memory one that is also the run's Ray driver. Only the actors are
Ray actors. The learner keeps the weights on its own device (``--gpu-ids``): run main.py on the GPU machine (the
head node) and let the actors go to the CPU nodes (docs/guide/ray.md).

The boundary is the shared-memory backend's, over the object store instead of slots:
- **unrolls in**: an actor's ``unroll`` method plays one unroll of its ``--envs-per-worker`` environments
  (``impala.acting.Acting``, the same code as the shared-memory actor) and returns it as numpy arrays, which Ray moves
  through its object store without a copy on the receiving side (torch tensors would be pickled). The learner
  keeps at most ``CALLS_PER_ACTOR`` calls outstanding per actor and collects them with ``ray.wait``, so the object
  store holds a bounded number of unrolls whatever the learner's speed (Ray's own IMPALA crashed with spills and
  out-of-memory errors from unbounded in-flight requests);
- **the queue**: arrived unrolls wait in a bounded queue of ``--num-buffers`` unrolls (as many as the shared-memory
  slots). While it is full, an actor whose call returns gets no new one (it waits, counted as ``actor_waits``, as
  a shared-memory actor waits for a free slot: on one machine its CPU goes to the learner), and results still in
  flight push out the oldest unrolls, dropped and counted (``dropped_unrolls``), as Ray's newer learners do;
- **weights out, with versions**: each new version of the shared model is published with one ``ray.put`` of its
  flat parameter buffer (a numpy array); every call to an actor carries the latest version number and the
  reference, and the actor fetches the object only when the version changed (``impala.inference.LocalPolicy``);
- the learner's step is ``impala.learner.LearnerStep`` in ``learner_loop``, as the shared-memory learner's.

Faults: an actor whose process or node dies (or whose method raises) is replaced with a new actor of the same
rank, and the run goes on; more than ``--max-restarts`` of that within a minute stops the learner, which the
supervisor then treats as any dead role. The actors belong to the learner's Ray job, so Ray removes them when the
learner ends (or dies); the cluster itself is ``Cluster``'s: started and stopped with the run, or the user's,
joined and left running.
"""

import argparse
import collections
import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Callable, Self

import numpy as np
import ray
import torch
from ray._private import ray_constants  # Ray is pinned (requirements-ray.txt): see Cluster.local

from core.logs import file_logger
from envs.environment import EnvSettings
from impala.acting import Acting, local_policy, unroll_frames
from impala.learner import LearnerStep, learner_loop, replays_for, unroll_features
from impala.replay import ReplayBuffer
from impala.unrolls import pack_frames, stack_rows, stacked_frames, unpack_frames
from model import flat_buffer, flatten_parameters
from runtime.config import ray_host_port
from runtime.context import RunContext
from runtime.defaults import final_slots, slots_per_actor
from runtime.evaluator import evaluator_role
from runtime.processes import setup_child_process
from runtime.run_state import RunState
from runtime.supervisor import RestartWindow

CALLS_PER_ACTOR = 2  # outstanding unroll calls per actor: one being played while the other's result travels
WAIT = 0.05  # seconds the learner waits for an unroll before it looks at the stop flag again
JOIN_TIMEOUT = 20.0  # seconds to join a cluster at --ray-address before calling the address bad
# For every Ray process this run starts: no usage reports. For a local cluster also one node on the loopback
# address: Ray binds its servers to the node's address, and without this it picks the machine's outward one
# (ray.init turns 127.0.0.1 into it). The variable is meant for single-node clusters on macOS and Windows; on
# Linux it means the same: the node's address is 127.0.0.1, and no other node can join.
QUIET = {"RAY_USAGE_STATS_ENABLED": "0"}
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class ClusterError(RuntimeError):
    """Ray could not start the run's local cluster (exit 1, one line)."""


class ActorsFailing(RuntimeError):
    """More than ``--max-restarts`` actor deaths within a minute."""


class Cluster:
    """The Ray cluster of a run: ``Cluster.local(workers)`` starts a one-machine cluster on the loopback address
    (stopped by ``stop``); ``Cluster.join(address)`` joins the user's (``stop`` leaves it running). The run's
    process stays connected as a Ray driver until ``stop``; the learner joins as a second one (``connect``)."""

    def __init__(self, address: str, started: bool) -> None:
        self.address, self.started = address, started

    @classmethod
    def local(cls, workers: int) -> Self:
        """A cluster of this machine alone, with a CPU per actor (Ray's CPUs are a count of actors here, not the
        cores: the shared-memory backend runs ``--workers`` actors whatever the cores too). Ray's processes are
        started with SIGINT blocked, which they inherit: a Ctrl-C in the terminal reaches every process of its
        group, and would kill the cluster under the run; the run stops them itself, in order."""
        os.environ.update(QUIET, **LOOPBACK_ONLY)  # Ray's processes and the learner read these as they import Ray
        ray_constants.ENABLE_RAY_CLUSTER = False  # what that variable sets, here: this process imported Ray already
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            # "local": a new cluster, always (with no address Ray would join the one `ray start` last started here)
            context = ray.init(address="local", num_cpus=workers, num_gpus=0, include_dashboard=False,
                               configure_logging=False, log_to_driver=False)
        except Exception as exc:  # no room in its temp folder, ports taken, ...: Ray's own words, one line
            ray.shutdown()
            raise ClusterError(f"could not start a local Ray cluster ({first_line(exc)})") from None
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return cls(context.address_info["gcs_address"], started=True)

    @classmethod
    def join(cls, address: str) -> Self:
        """Join the cluster at ``HOST:PORT``. Raises ValueError (bad input, exit 2) within about 25 seconds when
        nothing answers there, or something that is not a Ray cluster: ``ray.init`` alone retries for minutes."""
        os.environ.update(QUIET)
        host, port = ray_host_port(address)
        try:
            socket.create_connection((host, port), timeout=5.0).close()
        except OSError as exc:
            raise ValueError(f"--ray-address {address}: no Ray cluster answers there ({exc.strerror or exc}); start "
                             f"one with `ray start --head --port {port}`, or leave --ray-address out for a local "
                             f"one") from None
        failure = []

        def init():
            try:
                ray.init(address=address, configure_logging=False, log_to_driver=False)
            except Exception as exc:  # a version mismatch, a refused token, ...: Ray's own words, one line
                failure.append(first_line(exc))

        joining, said = threading.Thread(target=init, daemon=True), []
        with stderr_held(said):  # Ray's core logs each failed attempt: the user gets our one line instead
            joining.start()
            joining.join(JOIN_TIMEOUT)
        if joining.is_alive():
            raise ValueError(f"--ray-address {address}: something answers there, but no Ray cluster took this run "
                             f"within {JOIN_TIMEOUT:.0f} s (is it the head's GCS port, and the same Ray version?)")
        if failure:
            raise ValueError(f"--ray-address {address}: could not join the Ray cluster ({failure[0]})")
        # joined: what Ray had to say may matter now, but for its note that a thread cannot set signal handlers
        # (this process has its own)
        sys.stderr.write("".join(line for line in "".join(said).splitlines(keepends=True)
                                 if not line.startswith("SIGTERM handler is not set")))
        return cls(address, started=False)

    def describe(self, workers: int) -> str:
        """The start-up line's part about the cluster, with a warning where it has fewer CPUs than actors (one
        each: the others would wait for room, and so would the learner for their unrolls)."""
        resources = ray.cluster_resources()
        nodes = sum(1 for node in ray.nodes() if node["Alive"])
        cpus = resources.get("CPU", 0)
        how = "a local Ray cluster" if self.started else "the Ray cluster"
        short = f" (fewer than the {workers} actors' one each: the rest wait for room)" if cpus < workers else ""
        return f"{how} at {self.address}: {nodes} node(s), {cpus:g} CPU(s){short}, {resources.get('GPU', 0):g} GPU(s)"

    def stop(self) -> None:
        """Disconnect; a cluster this run started is shut down with it (every Ray process it started)."""
        ray.shutdown()


@contextlib.contextmanager
def stderr_held(said: list[str]) -> Iterator[None]:
    """File descriptor 2 (where Ray's C++ core and its Python logs both write) goes into a temporary file during
    the block; what was written is appended to ``said`` at its end."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            said.append(held.read().decode(errors="replace"))


def start_cluster(args: argparse.Namespace) -> Cluster:
    """The run's cluster: the user's at ``--ray-address``, else a local one. A Ctrl-C meanwhile (held back while
    Ray's processes start, then raised) shuts down whatever had started before it goes on."""
    try:
        return Cluster.join(args.ray_address) if args.ray_address else Cluster.local(args.workers)
    except KeyboardInterrupt:
        ray.shutdown()
        raise


def first_line(exc: BaseException) -> str:
    """An exception in one line: its message's first, or its type's name."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def connect(address: str) -> None:
    """The learner's connection: a second driver of the run's cluster (it owns the actors: they end with it)."""
    ray.init(address=address, configure_logging=False, log_to_driver=True)


class PublishedWeights:
    """The learner's side of weight publication: each version of the shared model is one ``ray.put`` of its flat
    parameter buffer (main.py lays the shared model out as one, ``model.flatten_parameters``), beside the number
    that ``LearnerStep`` and the actors compare."""

    def __init__(self, shared_model: torch.nn.Module) -> None:
        self.flat = flat_buffer(list(shared_model.parameters()))
        self.version = 0
        self.ref = ray.put(self.flat.numpy())

    def publish(self) -> None:
        self.version += 1
        self.ref = ray.put(self.flat.numpy())  # the previous object is freed once no actor's call holds it


class ReceivedWeights:
    """An actor's side: the version and object reference its latest call carried, as ``LocalPolicy`` expects of
    its weights (``version``, ``replica``, ``fetch``); the object itself is fetched only when the version changed.
    References travel inside a list so that Ray hands them over as references, not as the fetched objects."""

    def __init__(self, version: int, box: list[ray.ObjectRef]) -> None:
        self.offer(version, box)

    def offer(self, version: int, box: list[ray.ObjectRef]) -> None:
        """The version and reference of the latest call (``box``: a one-element list around the reference)."""
        self.version, self.ref = version, box[0]

    def replica(self, model: torch.nn.Module) -> torch.Tensor:
        return flatten_parameters(model)  # the same layout as the shared model's flat buffer

    def fetch(self, flat: torch.Tensor) -> int:
        flat.numpy()[:] = ray.get(self.ref)  # from the node's object store (read-only, zero-copy) into the model
        return self.version


def to_wire(unroll: dict[str, torch.Tensor], frame_stack: int, cuts: int, continues: bool = False
            ) -> dict[str, np.ndarray]:
    """An actor's unroll as Ray moves it: numpy arrays, each frame of a stack once (``unrolls.pack_frames``),
    without the first observation's frames where the unroll ``continues`` the actor's previous one (that one ended
    with them: ``UnrollQueue.put`` keeps them), and only the ``cuts`` rows of the cut observations that this unroll
    used (most use none); ``UnrollQueue`` rebuilds the layout."""
    arrays = {key: tensor.numpy() for key, tensor in unroll.items()}
    if frame_stack > 1:
        arrays["obs"] = pack_frames(unroll["obs"], frame_stack)[frame_stack if continues else 0:].numpy()
    arrays["final_obs"] = arrays["final_obs"][:cuts]
    return arrays


class Actor:
    """One IMPALA actor as a Ray actor: ``impala.acting.Acting`` with its own copy of the weights; one unroll per call."""

    def __init__(self, rank: int, args: argparse.Namespace, settings: EnvSettings, meta: dict, feature_size: int,
                 version: int, box: list[ray.ObjectRef]) -> None:
        torch.set_num_threads(1)  # one core's worth of work per actor, as the shared-memory actors (runtime/processes.py)
        torch.manual_seed(args.seed + rank)
        self.weights = ReceivedWeights(version, box)
        self.acting = Acting(args, settings, meta, local_policy(args, meta, self.weights), rank, feature_size,
                             args.bf16)
        self.frame_stack = stacked_frames(meta)
        self.continues = False  # the first unroll sends its first observation's frames; later ones begin where it ended
        self.where = (ray.get_runtime_context().get_node_id(), socket.gethostname(), os.getpid())

    def unroll(self, version: int, box: list[ray.ObjectRef]
               ) -> tuple[dict[str, np.ndarray], int, int, tuple[str, str, int], list[tuple[float, int]]]:
        """One unroll with the weights of ``version`` (or newer): numpy arrays (``Acting.unroll``'s layout), the
        version that acted, the games finished, where this actor runs, and the finished games' (return, length)."""
        self.weights.offer(version, box)
        unroll, acted, games = self.acting.unroll()
        arrays = to_wire(unroll, self.frame_stack, int(self.acting.cuts.max()), self.continues)
        self.continues = True
        return arrays, acted, games, self.where, self.acting.envs.take_finished()


class ActorFleet:
    """The learner's hold on the actors: ``--workers`` Ray actors (one CPU each), at most ``CALLS_PER_ACTOR``
    unroll calls outstanding per actor; a finished call leaves its actor idle until ``call_idle`` gives it a new
    one with the latest weights; an actor that died (its process, its node) or failed is replaced by a new one of
    the same rank."""

    def __init__(self, args: argparse.Namespace, settings: EnvSettings, meta: dict, feature_size: int,
                 weights: PublishedWeights, state: RunState, log: Callable[[str], object]) -> None:
        # one CPU each, spread over the nodes (their environments are the CPU work); no restarts by Ray: a new
        # actor of the same rank is this class's to make, with the latest weights
        remote = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(Actor)
        self.new_actor = lambda rank: remote.remote(rank, args, settings, meta, feature_size, weights.version,
                                                    [weights.ref])
        self.weights, self.state, self.log = weights, state, log
        self.actors = {rank: self.new_actor(rank) for rank in range(args.workers)}
        self.calls = {}  # outstanding call -> the rank of its actor
        self.idle = collections.deque(rank for rank in self.actors for _ in range(CALLS_PER_ACTOR))  # free calls
        self.deaths = RestartWindow(args.max_restarts)  # counted as the supervisor counts its roles' deaths
        self.placed = set()  # ranks whose actor's node is logged
        self.call_idle()

    def call_idle(self) -> None:
        """A new call, with the latest weights, for every call an actor has free."""
        while self.idle:
            rank = self.idle.popleft()
            self.calls[self.actors[rank].unroll.remote(self.weights.version, [self.weights.ref])] = rank

    def collect(self, timeout: float) -> list[tuple[int, dict[str, np.ndarray], int, int]]:
        """The unrolls that arrive within ``timeout`` seconds (all that are there, once one is): ``(rank, arrays,
        version, games)`` each, each actor's in the order it played them (a later one may begin where an earlier
        one ended: ``UnrollQueue.put``); the finished games' returns and lengths go into the run state's ring."""
        waiting = list(self.calls)  # in the order the calls were made
        ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
        ready = set(ready)
        arrived = []
        for ref in (ref for ref in waiting if ref in ready):
            rank = self.calls.pop(ref, None)
            if rank is None:  # a call of an actor replaced meanwhile
                continue
            try:
                arrays, version, games, where, finished = ray.get(ref)
            except ray.exceptions.RayError as exc:
                self.replace(rank, exc)
                continue
            if rank not in self.placed:
                self.placed.add(rank)
                self.log(f"actor {rank} runs on Ray node {where[0]} (host {where[1]}, pid {where[2]})")
            self.idle.append(rank)
            self.state.record_games(rank, finished)
            arrived.append((rank, arrays, version, games))
        return arrived

    def replace(self, rank: int, exc: BaseException) -> None:
        """A new actor for ``rank``; its predecessor's other calls are forgotten. Raises ActorsFailing after more
        than ``--max-restarts`` deaths within a minute."""
        reason = first_line(exc)
        if not self.deaths.death():
            raise ActorsFailing(f"actor {rank} failed ({reason}): {self.deaths.too_many('actor deaths')}")
        ray.kill(self.actors[rank])  # one that failed but lives would hold its CPU for nothing
        self.calls = {ref: r for ref, r in self.calls.items() if r != rank}
        self.idle = collections.deque(r for r in self.idle if r != rank)
        self.idle.extend([rank] * CALLS_PER_ACTOR)
        self.actors[rank] = self.new_actor(rank)
        self.placed.discard(rank)
        self.state.actor_restarts.value += 1
        self.log(f"actor {rank} failed ({type(exc).__name__}: {reason}); replaced by a new actor")

    def stop(self) -> None:
        """Kill every actor."""
        for handle in self.actors.values():
            ray.kill(handle)


class UnrollQueue:
    """The learner's queue of arrived unrolls, one environment's each, oldest first, at most ``capacity``: when
    full, the oldest is dropped (counted), so that a slow learner trains on recent unrolls and holds a bounded
    part of the object store. ``take`` stacks unrolls time-major, as ``UnrollSlots.read`` does for the slots.

    With stacked frames an actor sends its first observation's frames only in its first unroll (``to_wire``): the
    queue keeps each actor's last observation and puts it before the frames of the actor's next unroll, so that
    every frame crosses the wire once. An actor's unrolls must be put in the order it played them."""

    def __init__(self, capacity: int, final_slots: int = 1, frame_stack: int = 1) -> None:
        """``final_slots`` rows of cut observations per unroll and ``frame_stack``, as the slots have them
        (``to_wire`` sends fewer rows and each frame once)."""
        self.capacity, self.final_slots, self.frame_stack = capacity, final_slots, frame_stack
        self.items = collections.deque()  # (an actor's arrays, the environment's column in them, version)
        self.last = {}  # actor rank -> its last unroll's last observation, packed [k, B, H, W]

    def __len__(self) -> int:
        return len(self.items)

    def full(self) -> bool:
        return len(self.items) >= self.capacity

    def put(self, arrays: dict[str, np.ndarray], version: int, rank: int = 0) -> int:
        """Queue each environment's unroll of actor ``rank``'s ``arrays``; returns how many old ones were dropped."""
        if self.frame_stack > 1:
            arrays = self.whole_frames(arrays, rank)
        dropped = 0
        for column in range(arrays["actions"].shape[1]):
            if len(self.items) == self.capacity:
                self.items.popleft()
                dropped += 1
            self.items.append((arrays, column, version))
        return dropped

    def whole_frames(self, arrays: dict[str, np.ndarray], rank: int) -> dict[str, np.ndarray]:
        """``arrays`` with all ``T + k`` packed frames: an unroll that continues the actor's previous one gets that
        one's last observation before its ``T``; the actor's last observation is kept for its next unroll."""
        k, frames = self.frame_stack, arrays["obs"]
        if len(frames) == len(arrays["actions"]):  # T frames: the first observation is the previous unroll's last
            if rank not in self.last:
                raise RuntimeError(f"actor {rank}'s unroll continues one that never arrived")
            frames = np.concatenate([self.last[rank], frames])
            arrays = {**arrays, "obs": frames}
        rows = stack_rows(torch.tensor(arrays["dones"]), k)[-1].numpy()  # the last observation's rows, [B, k]
        self.last[rank] = np.moveaxis(frames[rows, np.arange(rows.shape[0])[:, None]], 1, 0)
        return arrays

    def drop_older_than(self, version: int) -> int:
        """``--max-policy-lag``: drop the unrolls acted by a version before ``version``; returns how many."""
        kept = collections.deque(item for item in self.items if item[2] >= version)
        dropped = len(self.items) - len(kept)
        self.items = kept
        return dropped

    def take(self, count: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The ``count`` oldest unrolls as one batch (``[T + 1, n, ...]`` observations, ``[T, n, ...]`` the rest,
        ``[n, H]`` states; features only where a replay ranks by them), and their versions ``[n]``."""
        items = [self.items.popleft() for _ in range(count)]
        batch = {}
        for key, array in items[0][0].items():  # every field of Acting.unroll's layout, as UnrollSlots.read has it
            if key == "features" and not array.shape[-1]:
                continue
            if key in ("hx", "cx"):  # [B, H]: a row per environment
                batch[key] = torch.from_numpy(np.stack([a[key][j] for a, j, _ in items]))
            elif key == "final_obs":  # the rows each unroll used, then zeros to the slots' count
                rows = np.zeros((self.final_slots, len(items), *array.shape[2:]), dtype=array.dtype)
                for i, (a, j, _) in enumerate(items):
                    rows[: len(a[key]), i] = a[key][:, j]
                batch[key] = torch.from_numpy(rows)
            else:  # time-major [T (+ 1), B, ...]
                batch[key] = torch.from_numpy(np.stack([a[key][:, j] for a, j, _ in items], axis=1))
        if self.frame_stack > 1:
            batch["obs"] = unpack_frames(batch["obs"], batch["dones"], self.frame_stack)
        return batch, torch.tensor([version for _, _, version in items])


class FleetSource:
    """The learner's ``UnrollSource`` with Ray: the actors' finished calls go into ``queue`` (too old unrolls
    dropped and counted); after each round, idle actors get a new call with the newest weights."""

    def __init__(self, args: argparse.Namespace, state: RunState, fleet: ActorFleet, queue: UnrollQueue) -> None:
        self.args, self.state, self.fleet, self.queue = args, state, fleet, queue
        self.frames_per_unroll = unroll_frames(args)

    def take(self, need: int, version: int) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        state, queue = self.state, self.queue
        for rank, arrays, acted, games in self.fleet.collect(0.0 if len(queue) >= need else WAIT):
            state.add(rank, self.frames_per_unroll, games)
            state.dropped.value += queue.put(arrays, acted, rank)
            if queue.full():  # this actor gets no new call until there is room: the learner is behind
                state.actor_waits.add(rank, 1)
        if self.args.max_policy_lag is not None:
            state.dropped.value += queue.drop_older_than(version - self.args.max_policy_lag)
        if len(queue) < need:
            return None
        fresh, versions = queue.take(need)
        return fresh, version - versions

    def after(self, took: bool) -> None:
        if not self.queue.full():
            self.fleet.call_idle()


def learner(run: RunContext, address: str, parent_pid: int, replays: list[ReplayBuffer]) -> None:
    """The Ray learner role: the run's actors (Ray actors it owns), ``learner_loop`` over their unrolls."""
    args, state = run.args, run.state
    setup_child_process(args.seed + args.workers + 1, parent_pid)
    logger = file_logger("a3g.ray", run.paths["log_file"], prefix="ray: ")

    def log(message):
        logger.info(message)
        print(f"a3g: {message}", file=sys.stderr, flush=True)

    connect(address)
    weights = PublishedWeights(run.shared_model)
    step = LearnerStep(args, run.meta, run.shared_model, run.optimizer, weights, state, replays)
    fleet = ActorFleet(args, run.settings, run.meta, unroll_features(args, run.meta), weights, state, log)
    # as many unrolls as the shared-memory slots, in their layout
    queue = UnrollQueue(slots_per_actor(args) * args.workers, final_slots(run.settings, args.num_steps),
                        stacked_frames(run.meta))
    try:
        learner_loop(step, FleetSource(args, state, fleet, queue), state, parent_pid)
    except ActorsFailing as exc:  # the run ends (stop_reason error), said in one line, not restarted
        log(f"{exc}; stopping")
        state.failed.value = 1
    finally:
        fleet.stop()
        ray.shutdown()


def ray_roles(run: RunContext, address: str) -> dict[str, tuple[Callable, tuple]]:
    """``--backend ray``'s roles for the supervisor: the learner (the actors are its Ray actors, in the cluster at
    ``address``) and the evaluator, the same as the shared-memory backend's."""
    replays = replays_for(run.args, run.settings, run.meta)
    return {"evaluator": evaluator_role(run), "learner": (learner, (run, address, os.getpid(), replays))}
