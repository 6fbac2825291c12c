"""Scripted agents that play the gyms without a model: the privileged oracle, the public planner,
the random agent and the give-up wrapper (``scripted``). They make warm-start demonstrations
(``eau sft``), test the gyms end to end and drive the benchmarks."""
