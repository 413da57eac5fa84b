"""Layer 6, orchestration: Airflow DAGs over the per-timestep runtime.

- ``dag_factory``: one DAG per ``circuits/*.yaml``, one DAG run per timestep
  (``plan`` >> one task per operator stage >> ``quality_check`` >> ``commit``).
- ``tasks``: what those tasks run (one step of the runtime contract, errors that a retry
  cannot fix fail at once).
- ``submission``: in-process (local, Connect, cluster driver) or ``spark-submit`` per task.
- ``docs``: the DAG's ``doc_md`` (the circuit, its incremental form, its tasks).
- ``airflow_env``: the environment of an isolated local Airflow (launcher and tests).

Nothing here imports pyspark at module level: the Airflow parser imports the factory for
every file parse, and a JVM or the Spark client there would slow every parse down.
"""
