"""Fixed evaluation (``eau eval``), kept apart from training: nothing here reads ``knobs/``.

* :mod:`~harness.eval.protocol` — the protocol file (``eval/protocol.yaml``) and its frozen files, ``protocol_hash``
* :mod:`~harness.eval.policy` — a run's policy rebuilt at a checkpoint (or ``init``)
* :mod:`~harness.eval.runner` — rollouts over enumerated tasks of a split (``evaluate_policy``)
* :mod:`~harness.eval.scoring` — per-gym scores, colbench pass/success, pass^k
* :mod:`~harness.eval.evaluate` — the three together (``evaluate_run``)
* :mod:`~harness.eval.results` — ``eval_results/<run_id>/`` (outside ``runs/``)
"""
