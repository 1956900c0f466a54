"""The JVM engine's room: wmobs' Spark extension, reached from Python by SQL function name.

Its JAR for the running Spark line, how a session gets it, and its functions called by name
(``_extension``).
"""
