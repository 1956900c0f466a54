-- The events judged by a time policy from SQL: wmobs' table-valued function.
CREATE STREAMING TABLE judged_sql AS
SELECT * FROM wmobs_time_policy(
  TABLE(SELECT * FROM STREAM events),
  early_arrival => '5 minutes',
  late_arrival => '5 minutes',
  out_of_order => '2 minutes',
  name => 'judged_sql'
);
