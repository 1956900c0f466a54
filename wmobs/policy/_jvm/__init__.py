"""The JVM engine's room: wmobs' Spark extension, reached from Python by SQL function name.

Its stages (``_stages.JvmEngine``, the interface of :mod:`wmobs.policy._stages`): the rules
(``_rules``, ``PolicyRules.java``), substreams in Spark's state store (``_substreams``), what it
counts in one aggregate (``_observe``), dead letters by Spark's Parquet writer
(``_deadletters``), and a policy planned by name in a pipeline's query function
(``_pipeline``). The bridge (``_extension``): the JAR of each Spark line, how a session gets
it, and the extension's functions called by name. It imports the engine-neutral modules of
:mod:`wmobs.policy`, never the Python engine's room.
"""
