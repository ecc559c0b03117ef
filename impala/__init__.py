"""IMPALA (Espeholt et al. 2018) in a3g: actors, a V-trace learner and the evaluator under the same supervisor as
A3G. ``acting`` and ``learner`` are the roles' work, written once; ``shm`` moves unrolls and weights through shared
memory on one machine, ``ray_backend`` through Ray's object store across machines; ``inference`` batches the
actors' forward passes; ``replay`` and ``unrolls`` hold stored unrolls."""
