"""The Python engine's room: time policies run by Python data sources, ``mapInArrow`` and
Spark's own aggregates, for sessions that cannot load wmobs' Spark extension.

Its stages (``_stages.PythonEngine``, the interface of :mod:`wmobs.policy._stages`): the rules
as Column expressions (``_rules``), with the batch's times read from the checkpoint
(``_checkpoint``) by a one-row data source (``_watermark_source``); substreams in the plan
(``_substreams``) as rules, state and stage (``_substream_judge``, ``_substream_state``,
``_substream_stage``); what it counts (``_observe``); the idle-timeout rule and its heartbeat
source (``_idle``, ``_idle_source``). It imports the engine-neutral modules of
:mod:`wmobs.policy`, never the JVM engine's room.
"""
