-- Group commit of 0¢ query rows: many warm queries' rows in one statement and one transaction, so the
-- ledger's commit is shared instead of paid per request. Each row keeps lsp_record_query's meaning.

-- lsp_record_queries writes one 0¢ query row per array element (all arrays have one element per row). Like lsp_record_query, a row whose prepare id names a live or expired hold of
-- the same org, tenant key, repo and commit first captures that hold into its prepare row (reason
-- 'recovered', at most once); the prepare ids so recovered are returned.
--
-- Locks: every org's account row first, in org order, so that two batches (of this proxy or another)
-- do not deadlock, and so an org's ids still commit in ascending order (the lock is held while they
-- are drawn); then the holds to recover, in prepare id order. (A batch that brings orgs new to the
-- ledger may still meet another in a deadlock; Postgres breaks it by failing one, whose rows the
-- proxy then writes one by one.)
CREATE FUNCTION lsp_record_queries(p_org text[], p_tenant_key text[], p_subject text[], p_repo text[],
                                   p_commit text[], p_op text[], p_language text[],
                                   p_request_id text[], p_http_status integer[], p_prepare_id text[])
RETURNS SETOF text
LANGUAGE plpgsql
-- Its statements take arrays; custom plans would be made again on every call (the planner never
-- trusts a generic plan over an array), and planning costs more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n      integer := cardinality(p_org);
    v_org    text;
    v_locked integer;
    h        holds;
BEGIN
    IF v_n IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_tenant_key) <> v_n OR cardinality(p_subject) <> v_n OR cardinality(p_repo) <> v_n
       OR cardinality(p_commit) <> v_n OR cardinality(p_op) <> v_n OR cardinality(p_language) <> v_n
       OR cardinality(p_request_id) <> v_n OR cardinality(p_http_status) <> v_n
       OR cardinality(p_prepare_id) <> v_n THEN
        RAISE EXCEPTION 'lsp_record_queries: arrays of different lengths'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- One statement locks the accounts that exist (in org order: the lock sits above the sort). A
    -- batch with an org new to the ledger creates its account the way lsp_lock_account does.
    SELECT count(*) INTO v_locked
      FROM (SELECT 1 FROM accounts a WHERE a.org = ANY (p_org) ORDER BY a.org FOR NO KEY UPDATE) l;
    IF v_locked < (SELECT count(DISTINCT o) FROM unnest(p_org) AS o) THEN
        FOR v_org IN SELECT DISTINCT o FROM unnest(p_org) AS o ORDER BY o LOOP
            PERFORM lsp_lock_account(v_org, true);
        END LOOP;
    END IF;

    -- Warm queries name a prepare that was captured long ago: one index probe says there is nothing
    -- to recover. No hold of these orgs can become live meanwhile (a hold is taken under the account
    -- lock we hold).
    IF EXISTS (SELECT 1 FROM holds x WHERE x.prepare_id = ANY (p_prepare_id) AND x.state IN ('live', 'expired')) THEN
        FOR h IN
            SELECT x.* FROM holds x
             WHERE x.prepare_id = ANY (p_prepare_id) AND x.state IN ('live', 'expired')
               AND EXISTS (SELECT 1
                             FROM unnest(p_org, p_tenant_key, p_repo, p_commit, p_prepare_id)
                                  AS r(org, tenant_key, repo, commit, prepare_id)
                            WHERE r.prepare_id = x.prepare_id AND r.org = x.org
                              AND r.tenant_key = x.tenant_key AND r.repo = x.repo AND r.commit = x.commit)
             ORDER BY x.prepare_id
               FOR UPDATE
        LOOP
            -- The prepare row describes the request that prepared (from the hold), not these.
            PERFORM lsp_settle(h, '', '', '', '', NULL, true);
            RETURN NEXT h.prepare_id;
        END LOOP;
    END IF;

    INSERT INTO ledger_rows (kind, model, payer_org, tenant_key, subject, repo, commit, op, language,
                             amount_cents, http_status, request_id, prepare_id)
    SELECT 'lsp', 'query', r.org, nullif(r.tenant_key, ''), nullif(r.subject, ''), nullif(r.repo, ''),
           nullif(r.commit, ''), nullif(r.op, ''), nullif(r.language, ''), 0, nullif(r.http_status, 0),
           nullif(r.request_id, ''), nullif(r.prepare_id, '')
      FROM unnest(p_org, p_tenant_key, p_subject, p_repo, p_commit, p_op, p_language, p_request_id,
                  p_http_status, p_prepare_id)
           AS r(org, tenant_key, subject, repo, commit, op, language, request_id, http_status,
                prepare_id);
    RETURN;
END
$$;
