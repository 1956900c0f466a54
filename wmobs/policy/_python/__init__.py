"""The Python engine's room: time policies run by Python data sources, ``mapInArrow`` and
Spark's own aggregates, for sessions that cannot load wmobs' Spark extension.

The batch's times read from the checkpoint (``_checkpoint``) by a one-row data source
(``_watermark_source``); substreams as rules, state and stage (``_substream_judge``,
``_substream_state``, ``_substream_stage``); the idle-timeout rule and its heartbeat source
(``_idle``, ``_idle_source``).
"""
