-- v_usage_daily reads the days not rolled up yet through lsp_usage_rollup_rows, and a function runs
-- with its caller's rights: the read-only role, which may read the views and no table, could not read
-- that view ("permission denied for table usage_rows"). The function now runs with its owner's rights
-- (the owner of the tables and views), its search_path fixed to the schema it lives in, then
-- pg_catalog, then pg_temp last (unlisted, pg_temp is searched first: a caller's temporary table named
-- usage_rows would be read), and only its owner and the roles granted it may call it: the runner
-- grants the read-only role EXECUTE with its views (migrations.ReadonlyFunctions).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION lsp_usage_rollup_rows(text, timestamptz, timestamptz, text) SECURITY DEFINER '
                   'SET search_path = %I, pg_catalog, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION lsp_usage_rollup_rows(text, timestamptz, timestamptz, text) FROM PUBLIC;

-- lsp_usage_retain rolled up ended days and dropped old partitions in one transaction: the DROP's lock
-- on usage_rows, taken for the first day past the retention, was held while yesterday's partition was
-- rolled up after it, and every usage row's INSERT waited (12.7 s for a rollup of 3 million rows) —
-- longer than a request's ledger bound, so every operation answered 503 meanwhile, once a day.
-- Retention is now a sequence of short statements, each in its own transaction (ledger.RetainUsage):
-- the rollups first, then each drop under a lock timeout.
DROP FUNCTION lsp_usage_retain(interval, interval);
