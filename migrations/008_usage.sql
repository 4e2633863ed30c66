-- Money and usage split (HIP §5).
--
-- ledger_rows keeps only money rows — credits, prepares (charged, re-prepares at 0¢, recovered,
-- shortfall) — immutable and kept forever; balances and reconcile read only them. Usage — one row per
-- operation request that reached the daemon, the request that prepared included — goes to
-- usage_rows: append-only, partitioned by UTC day, written once after the answer is known and before
-- it is sent, group committed without the account lock, never amended or deleted. Whole partitions
-- are dropped after LSP_USAGE_RETENTION once their day is rolled up into usage_daily, which is kept.
--
-- Both tables draw ids from one sequence (ledger_rows' own), so the API, the CSV and v_ledger_rows
-- present them in one monotonic id order. Every new row's created_at is the clock when its id is
-- drawn (clock_timestamp(), not the transaction's start), which is what lets readers and reconcile
-- tell which ids are settled: a row created more than a minute ago has committed or never will
-- (every writer's statement is bounded well below that).

-- The sequence both tables draw from.
ALTER TABLE ledger_rows ALTER COLUMN created_at SET DEFAULT clock_timestamp();

CREATE TABLE usage_rows (
    id          bigint      NOT NULL, -- DEFAULT: ledger_rows' sequence, set below
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    payer_org   text        NOT NULL,
    tenant_key  text,
    subject     text,
    repo        text,
    commit      text,
    op          text,
    language    text,
    http_status smallint    CHECK (http_status BETWEEN 100 AND 599),
    request_id  text,
    -- the prepare id the answer named (the workspace's), or this request's own when it prepared
    prepare_id  text,
    -- true when this request's push wrote the tree: its money row is the prepare row of prepare_id
    prepared    boolean     NOT NULL DEFAULT false
) PARTITION BY RANGE (created_at);

DO $$
BEGIN
    EXECUTE format('ALTER TABLE usage_rows ALTER COLUMN id SET DEFAULT nextval(%L::regclass)',
                   pg_get_serial_sequence('ledger_rows', 'id'));
END
$$;

-- Per partition: an org's rows by id (listing, rollups of the current day) and by repository; the
-- request that prepared, by prepare id (the status of a prepare row).
CREATE INDEX usage_rows_payer_id ON usage_rows (payer_org, id);
CREATE INDEX usage_rows_payer_repo_id ON usage_rows (payer_org, repo, id);
CREATE INDEX usage_rows_prepared ON usage_rows (prepare_id) WHERE prepared;
-- Reconcile's id ranges: ids grow with the insert order, so a block range index is tiny and enough.
CREATE INDEX usage_rows_id_brin ON usage_rows USING brin (id);

-- lsp_usage_partition creates the partition of day d if missing and returns its name.
CREATE FUNCTION lsp_usage_partition(d date) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_name text := format('usage_rows_%s', to_char(d, 'YYYYMMDD'));
BEGIN
    IF to_regclass(v_name) IS NULL THEN
        EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF usage_rows FOR VALUES FROM (%L) TO (%L)',
                       v_name, (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
    END IF;
    RETURN v_name;
END
$$;

-- lsp_usage_partitions makes sure yesterday, today and the next p_ahead days have partitions.
CREATE FUNCTION lsp_usage_partitions(p_ahead integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_today date := (clock_timestamp() AT TIME ZONE 'UTC')::date;
BEGIN
    FOR i IN -1 .. greatest(p_ahead, 1) LOOP
        PERFORM lsp_usage_partition(v_today + i);
    END LOOP;
END
$$;

-- Daily rollups per org, repository, operation and status, kept after the day's partition is dropped.
-- requests counts usage rows, prepares those that prepared, cents what the day's prepare rows charged
-- (a prepare recovered from a later answer has no request of its own: op 'prepare', status 0).
CREATE TABLE usage_daily (
    day      date   NOT NULL,
    org      text   NOT NULL,
    repo     text   NOT NULL,
    op       text   NOT NULL,
    status   integer NOT NULL,
    requests bigint NOT NULL,
    prepares bigint NOT NULL,
    cents    bigint NOT NULL,
    PRIMARY KEY (org, day, repo, op, status)
);
-- The days whose rollup is final.
CREATE TABLE usage_rollup_days (
    day       date        PRIMARY KEY,
    rolled_at timestamptz NOT NULL DEFAULT now()
);

-- lsp_usage_rollup_rows computes the rollup of [p_from, p_to) for one org (or every org when p_org is
-- NULL) from the rows themselves.
CREATE FUNCTION lsp_usage_rollup_rows(p_org text, p_from timestamptz, p_to timestamptz, p_repo text)
RETURNS TABLE (day date, org text, repo text, op text, status integer, requests bigint, prepares bigint,
               cents bigint)
LANGUAGE sql STABLE AS $$
    WITH u AS (
        SELECT (u.created_at AT TIME ZONE 'UTC')::date AS day, u.payer_org AS org,
               coalesce(u.repo, '') AS repo, coalesce(u.op, '') AS op,
               coalesce(u.http_status, 0)::integer AS status,
               count(*) AS requests, count(*) FILTER (WHERE u.prepared) AS prepares
          FROM usage_rows u
         WHERE (p_org IS NULL OR u.payer_org = p_org) AND u.created_at >= p_from AND u.created_at < p_to
           AND (p_repo IS NULL OR u.repo = p_repo)
         GROUP BY 1, 2, 3, 4, 5),
    m AS (
        SELECT (m.created_at AT TIME ZONE 'UTC')::date AS day, m.payer_org AS org,
               coalesce(m.repo, '') AS repo, coalesce(p.op, 'prepare') AS op,
               coalesce(p.http_status, 0)::integer AS status, -sum(m.amount_cents) AS cents
          FROM ledger_rows m
          LEFT JOIN LATERAL (SELECT x.op, x.http_status FROM usage_rows x
                              WHERE x.prepared AND x.prepare_id = m.prepare_id
                                AND x.created_at >= m.created_at - interval '1 minute'
                                AND x.created_at < m.created_at + interval '1 hour' LIMIT 1) p ON true
         WHERE m.model = 'prepare' AND (p_org IS NULL OR m.payer_org = p_org)
           AND m.created_at >= p_from AND m.created_at < p_to AND (p_repo IS NULL OR m.repo = p_repo)
         GROUP BY 1, 2, 3, 4, 5)
    SELECT coalesce(u.day, m.day), coalesce(u.org, m.org), coalesce(u.repo, m.repo), coalesce(u.op, m.op),
           coalesce(u.status, m.status), coalesce(u.requests, 0), coalesce(u.prepares, 0),
           coalesce(m.cents, 0)
      FROM u FULL JOIN m USING (day, org, repo, op, status)
$$;

-- lsp_usage_rollup makes day d's rollup final, once: only a day that ended more than p_settle ago.
-- Returns whether it rolled the day up now.
CREATE FUNCTION lsp_usage_rollup(d date, p_settle interval) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_from timestamptz := d::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF v_from + interval '1 day' + p_settle > clock_timestamp() THEN
        RETURN false;
    END IF;
    INSERT INTO usage_rollup_days (day) VALUES (d) ON CONFLICT (day) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO usage_daily (day, org, repo, op, status, requests, prepares, cents)
    SELECT * FROM lsp_usage_rollup_rows(NULL, v_from, v_from + interval '1 day', NULL);
    RETURN true;
END
$$;

-- lsp_usage_retain rolls up every ended day that has a partition, then drops the partitions of days
-- older than p_keep whose rollup is final. Returns the partitions dropped.
CREATE FUNCTION lsp_usage_retain(p_keep interval, p_settle interval) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    v_day   date;
    v_today date := (clock_timestamp() AT TIME ZONE 'UTC')::date;
    v_n     integer := 0;
BEGIN
    FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'usage_rows'::regclass ORDER BY c.relname LOOP
        v_day := to_date(substring(r.relname FROM 'usage_rows_([0-9]{8})$'), 'YYYYMMDD');
        IF v_day IS NULL OR v_day >= v_today THEN
            CONTINUE;
        END IF;
        PERFORM lsp_usage_rollup(v_day, p_settle);
        IF (v_day + 1)::timestamp AT TIME ZONE 'UTC' <= clock_timestamp() - p_keep
           AND EXISTS (SELECT 1 FROM usage_rollup_days x WHERE x.day = v_day) THEN
            EXECUTE format('DROP TABLE %I', r.relname);
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;

-- Move the existing data: partitions for every day that has query or prepare rows, the query rows with
-- their ids and times, and a usage row (prepared) for each prepare row a request made (a recovered one
-- was revealed by another request, whose own query row is moved already).
DO $$
DECLARE
    d date;
BEGIN
    FOR d IN SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM ledger_rows WHERE kind = 'lsp' LOOP
        PERFORM lsp_usage_partition(d);
    END LOOP;
END
$$;
SELECT lsp_usage_partitions(2);

INSERT INTO usage_rows (id, created_at, payer_org, tenant_key, subject, repo, commit, op, language,
                        http_status, request_id, prepare_id, prepared)
SELECT id, created_at, payer_org, tenant_key, subject, repo, commit, op, language, http_status,
       request_id, prepare_id, false
  FROM ledger_rows WHERE model = 'query';
INSERT INTO usage_rows (created_at, payer_org, tenant_key, subject, repo, commit, op, language,
                        http_status, request_id, prepare_id, prepared)
SELECT created_at, payer_org, tenant_key, subject, repo, commit, coalesce(op, 'prepare'), language,
       http_status, request_id, prepare_id, true
  FROM ledger_rows WHERE model = 'prepare' AND reason IS DISTINCT FROM 'recovered';
DELETE FROM ledger_rows WHERE model = 'query';
ALTER TABLE ledger_rows ADD CONSTRAINT ledger_rows_money_only CHECK (model IS DISTINCT FROM 'query');

-- The write-ahead rows and their amend and void path go; so do the query-row writers of the ledger.
DROP FUNCTION lsp_amend_query(bigint, text, text, text, integer, text);
DROP FUNCTION lsp_void_query(bigint, text, text);
DROP FUNCTION lsp_record_query_id(text, text, text, text, text, text, text, text, integer, text);
DROP FUNCTION lsp_record_queries_ids(text[], text[], text[], text[], text[], text[], text[], text[], integer[], text[]);
DROP FUNCTION lsp_record_queries(text[], text[], text[], text[], text[], text[], text[], text[], integer[], text[]);
DROP FUNCTION lsp_record_query(text, text, text, text, text, text, text, text, integer, text);

-- Rows never change once written: corrections, if ever needed, are new rows.
CREATE FUNCTION lsp_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER ledger_rows_immutable BEFORE UPDATE OR DELETE ON ledger_rows
    FOR EACH ROW EXECUTE FUNCTION lsp_immutable();
CREATE TRIGGER usage_rows_immutable BEFORE UPDATE OR DELETE ON usage_rows
    FOR EACH ROW EXECUTE FUNCTION lsp_immutable();

-- lsp_record_usage writes one usage row per array element (all arrays have one element per row), in
-- one statement. It takes no account lock: usage rows carry no money. Only when a row names a prepare
-- id whose hold is not captured (its proxy crashed, lost the daemon's reply, or released a hold whose
-- tree was published after all) does it first capture that hold into its prepare row (reason
-- 'recovered' or 'shortfall'), under that org's account lock, in org order, at most once; so no usage
-- row ever names a prepare id without its money row. Returns the prepare ids so recovered.
CREATE FUNCTION lsp_record_usage(p_org text[], p_tenant_key text[], p_subject text[], p_repo text[],
                                 p_commit text[], p_op text[], p_language text[], p_request_id text[],
                                 p_http_status integer[], p_prepare_id text[], p_prepared boolean[])
RETURNS SETOF text
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n integer := cardinality(p_org);
    r   record;
    h   holds;
BEGIN
    IF v_n IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_tenant_key) <> v_n OR cardinality(p_subject) <> v_n OR cardinality(p_repo) <> v_n
       OR cardinality(p_commit) <> v_n OR cardinality(p_op) <> v_n OR cardinality(p_language) <> v_n
       OR cardinality(p_request_id) <> v_n OR cardinality(p_http_status) <> v_n
       OR cardinality(p_prepare_id) <> v_n OR cardinality(p_prepared) <> v_n THEN
        RAISE EXCEPTION 'lsp_record_usage: arrays of different lengths'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Warm rows name a prepare captured long ago: one index probe each says there is nothing to do.
    FOR r IN
        SELECT DISTINCT x.org, x.prepare_id
          FROM holds x
          JOIN unnest(p_org, p_tenant_key, p_repo, p_commit, p_prepare_id)
               AS q(org, tenant_key, repo, commit, prepare_id)
            ON q.prepare_id = x.prepare_id AND q.org = x.org AND q.tenant_key = x.tenant_key
           AND q.repo = x.repo AND q.commit = x.commit
         WHERE x.state <> 'captured'
         ORDER BY x.org, x.prepare_id
    LOOP
        PERFORM lsp_lock_account(r.org, false);
        SELECT * INTO h FROM holds x WHERE x.prepare_id = r.prepare_id AND x.state <> 'captured' FOR UPDATE;
        IF FOUND THEN
            -- The prepare row describes the request that prepared (from the hold), not these.
            PERFORM lsp_settle(h, '', '', '', '', NULL, true);
            RETURN NEXT h.prepare_id;
        END IF;
    END LOOP;

    INSERT INTO usage_rows (payer_org, tenant_key, subject, repo, commit, op, language, http_status,
                            request_id, prepare_id, prepared)
    SELECT q.org, nullif(q.tenant_key, ''), nullif(q.subject, ''), nullif(q.repo, ''), nullif(q.commit, ''),
           nullif(q.op, ''), nullif(q.language, ''), nullif(q.http_status, 0), nullif(q.request_id, ''),
           nullif(q.prepare_id, ''), q.prepared
      FROM unnest(p_org, p_tenant_key, p_subject, p_repo, p_commit, p_op, p_language, p_request_id,
                  p_http_status, p_prepare_id, p_prepared)
           AS q(org, tenant_key, subject, repo, commit, op, language, request_id, http_status,
                prepare_id, prepared);
    RETURN;
END
$$;

-- Views for dashboards (documented in README.md): which table each reads.
--   v_money_rows  ledger_rows: credits and prepares, kept forever; balances and reconcile read these.
--   v_usage_rows  usage_rows: one row per request that reached the daemon, within LSP_USAGE_RETENTION.
--   v_usage_daily usage_daily: final daily rollups, plus the days not rolled up yet computed live.
--   v_ledger_rows both, as the API presents them: money rows (a prepare row with the HTTP status of
--                 the request that prepared) and the usage rows of requests that did not prepare
--                 (model 'query', 0¢).
CREATE VIEW v_money_rows AS
SELECT id, kind, model, payer_org, tenant_key, subject, repo, commit, op, language, amount_cents,
       http_status, request_id, prepare_id, reason, created_at
  FROM ledger_rows;

CREATE VIEW v_usage_rows AS
SELECT id, created_at, payer_org, tenant_key, subject, repo, commit, op, language,
       http_status::integer AS http_status, request_id, prepare_id, prepared
  FROM usage_rows;

CREATE VIEW v_usage_daily AS
SELECT day, org, repo, op, status, requests, prepares, cents FROM usage_daily
UNION ALL
SELECT r.* FROM (SELECT coalesce(max(day) + 1, '-infinity'::date) AS since FROM usage_rollup_days) s,
       LATERAL lsp_usage_rollup_rows(NULL, s.since::timestamp AT TIME ZONE 'UTC', 'infinity', NULL) r;

CREATE OR REPLACE VIEW v_ledger_rows AS
SELECT m.id, m.kind, m.model, m.payer_org, m.tenant_key, m.subject, m.repo, m.commit, m.op, m.language,
       m.amount_cents, coalesce(m.http_status, p.http_status::integer) AS http_status, m.request_id,
       m.prepare_id, m.reason, m.created_at
  FROM ledger_rows m
  LEFT JOIN LATERAL (SELECT x.http_status FROM usage_rows x
                      WHERE x.prepared AND x.prepare_id = m.prepare_id
                        AND x.created_at >= m.created_at - interval '1 minute'
                        AND x.created_at < m.created_at + interval '1 hour' LIMIT 1) p ON m.model = 'prepare'
UNION ALL
SELECT u.id, 'lsp', 'query', u.payer_org, u.tenant_key, u.subject, u.repo, u.commit, u.op, u.language,
       0::bigint, u.http_status::integer, u.request_id, u.prepare_id, NULL::text, u.created_at
  FROM usage_rows u
 WHERE NOT u.prepared;

-- Dashboards' filters: an org's money rows by model and by repository, in id order.
CREATE INDEX ledger_rows_payer_model_id ON ledger_rows (payer_org, (coalesce(model, kind)), id);
CREATE INDEX ledger_rows_payer_repo_id ON ledger_rows (payer_org, repo, id);

-- Reconcile: orphans among live and expired holds; holds by the row they were captured into.
CREATE INDEX holds_unsettled ON holds (expires_at) WHERE state IN ('live', 'expired');
CREATE INDEX holds_ledger_row ON holds (ledger_row_id) WHERE ledger_row_id IS NOT NULL;
CREATE INDEX ledger_rows_created ON ledger_rows (created_at);

-- Reconcile runs incrementally: what it has checked so far.
CREATE TABLE reconcile_state (
    name       text        PRIMARY KEY,
    through_id bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Per org: the sum of its money rows with id <= through_id.
CREATE TABLE reconcile_sums (
    org        text   PRIMARY KEY,
    through_id bigint NOT NULL,
    total      bigint NOT NULL
);
