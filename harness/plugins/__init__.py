"""Plug-ins: repair a gym's logic while a run is live, without a restart.

A gym exposes named **override points** (:mod:`harness.plugins.points`): small pure functions with
a documented signature and a default implementation, such as ``base.counts_as_question`` or
``telepathy.answer_correct``. A **plug-in** is a Python module in ``knobs/plugins/<name>.py`` whose
``OVERRIDES`` dict maps point names to functions::

    def counts_as_question(question, gym):
        return question.strip().endswith("?")

    OVERRIDES = {"base.counts_as_question": counts_as_question}

A run puts a changed plug-in in force at a step boundary after the **gate**
(:mod:`harness.plugins.gate`: import in a separate process under a time limit, the points' own
checks, a replay of the run's recorded episodes); a plug-in that fails it is refused with its error
and the previous version stays in force. Plug-in code only ever runs in a worker process under time
limits (:mod:`harness.plugins.runtime`). Every swap is a knob event with the code's sha256, author
and reason, revertible like any knob (:mod:`harness.plugins.folder`). Agent-facing docs:
``skill/references/plugins.md``.
"""
