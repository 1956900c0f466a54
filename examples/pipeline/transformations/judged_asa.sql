-- The events judged per device as Azure Stream Analytics writes it: the event time and the
-- keys from TIMESTAMP BY ... OVER, the policy named after its input (events), and the
-- tolerances from settings, as ASA's come from the job (here for this file's flows; in
-- spark-pipeline.yml's configuration, for every flow of the pipeline).
SET spark.wmobs.sql.late_arrival = 5 minutes;
SET spark.wmobs.sql.out_of_order = 2 minutes;

CREATE STREAMING TABLE judged_asa AS
SELECT * FROM STREAM events TIMESTAMP BY EventTime OVER deviceId;
