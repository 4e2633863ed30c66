-- Query rows written alongside the daemon call. The proxy writes a warm query's 0¢ row while the
-- daemon answers, with the outcome it expects (the status 200, the workspace's prepare id and the
-- server its last answer named), so the row's commit is not serial with the language server. When
-- the outcome differs it amends that row, by id, before answering; when the request turns out to
-- have prepared (its row is then the prepare row) or never reached the daemon, it voids it. These
-- functions give the writers the row ids and do the amending and voiding.

-- lsp_record_query_id is lsp_record_query, also returning the id of the row it wrote: the last id
-- this session drew from ledger_rows' own sequence (the query row is the function's last insert
-- there; currval of that sequence, not lastval, so no other sequence a trigger might use can
-- interfere).
CREATE FUNCTION lsp_record_query_id(p_org text, p_tenant_key text, p_subject text, p_repo text,
                                    p_commit text, p_op text, p_language text, p_request_id text,
                                    p_http_status integer, p_prepare_id text,
                                    OUT o_id bigint, OUT o_recovered boolean)
LANGUAGE plpgsql AS $$
BEGIN
    o_recovered := lsp_record_query(p_org, p_tenant_key, p_subject, p_repo, p_commit, p_op, p_language,
                                    p_request_id, p_http_status, p_prepare_id);
    o_id := currval(pg_get_serial_sequence('ledger_rows', 'id'));
END
$$;

-- lsp_record_queries_ids is lsp_record_queries, also returning each row's id with its position in
-- the arrays (o_ord, 1-based). A recovered prepare id comes as a row of its own, with o_ord NULL.
-- Same locks, in the same order; the rows are inserted one by one so that each id is known.
CREATE FUNCTION lsp_record_queries_ids(p_org text[], p_tenant_key text[], p_subject text[], p_repo text[],
                                       p_commit text[], p_op text[], p_language text[],
                                       p_request_id text[], p_http_status integer[], p_prepare_id text[])
RETURNS TABLE (o_ord integer, o_id bigint, o_recovered text)
LANGUAGE plpgsql
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
        RAISE EXCEPTION 'lsp_record_queries_ids: arrays of different lengths'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT count(*) INTO v_locked
      FROM (SELECT 1 FROM accounts a WHERE a.org = ANY (p_org) ORDER BY a.org FOR NO KEY UPDATE) l;
    IF v_locked < (SELECT count(DISTINCT o) FROM unnest(p_org) AS o) THEN
        FOR v_org IN SELECT DISTINCT o FROM unnest(p_org) AS o ORDER BY o LOOP
            PERFORM lsp_lock_account(v_org, true);
        END LOOP;
    END IF;

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
            PERFORM lsp_settle(h, '', '', '', '', NULL, true);
            o_ord := NULL; o_id := NULL; o_recovered := h.prepare_id;
            RETURN NEXT;
        END LOOP;
    END IF;

    o_recovered := NULL;
    FOR i IN 1 .. v_n LOOP
        INSERT INTO ledger_rows (kind, model, payer_org, tenant_key, subject, repo, commit, op, language,
                                 amount_cents, http_status, request_id, prepare_id)
        VALUES ('lsp', 'query', p_org[i], nullif(p_tenant_key[i], ''), nullif(p_subject[i], ''),
                nullif(p_repo[i], ''), nullif(p_commit[i], ''), nullif(p_op[i], ''),
                nullif(p_language[i], ''), 0, nullif(p_http_status[i], 0), nullif(p_request_id[i], ''),
                nullif(p_prepare_id[i], ''))
        RETURNING id INTO o_id;
        o_ord := i;
        RETURN NEXT;
    END LOOP;
    RETURN;
END
$$;

-- lsp_amend_query corrects the outcome of a query row written before the answer was known: its HTTP
-- status, language and prepare id. The row is named by id and must be that org's query row with that
-- request id (a wrong id fails rather than touching another row). A prepare id that names a live or
-- expired hold of the row's workspace captures it first, as lsp_record_query would have; returns
-- whether it did. Takes the org's account lock, as every writer of the org's rows does.
CREATE FUNCTION lsp_amend_query(p_id bigint, p_org text, p_request_id text, p_language text,
                                p_http_status integer, p_prepare_id text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    a           accounts;
    r           ledger_rows;
    h           holds;
    v_recovered boolean := false;
BEGIN
    a := lsp_lock_account(p_org, true);
    SELECT * INTO r FROM ledger_rows x
     WHERE x.id = p_id AND x.payer_org = p_org AND x.model = 'query'
       AND x.request_id IS NOT DISTINCT FROM nullif(p_request_id, '')
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lsp_amend_query: no query row % of % with request id %', p_id, p_org, p_request_id
            USING ERRCODE = 'no_data_found';
    END IF;
    IF p_prepare_id <> '' AND p_prepare_id IS DISTINCT FROM r.prepare_id THEN
        SELECT * INTO h FROM holds x
         WHERE x.prepare_id = p_prepare_id AND x.org = p_org AND x.tenant_key = r.tenant_key
           AND x.repo = r.repo AND x.commit = r.commit AND x.state IN ('live', 'expired')
           FOR UPDATE;
        IF FOUND THEN
            PERFORM lsp_settle(h, '', '', '', '', NULL, true);
            v_recovered := true;
        END IF;
    END IF;
    UPDATE ledger_rows
       SET http_status = nullif(p_http_status, 0), language = nullif(p_language, ''),
           prepare_id = nullif(p_prepare_id, '')
     WHERE id = p_id;
    RETURN v_recovered;
END
$$;

-- lsp_void_query removes a query row written before the answer was known, when the request turned
-- out to write another row (it prepared: its row is the prepare row) or none (the daemon was never
-- reached). Same naming rule and lock as lsp_amend_query. A 0¢ row: no balance changes.
CREATE FUNCTION lsp_void_query(p_id bigint, p_org text, p_request_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
BEGIN
    a := lsp_lock_account(p_org, true);
    DELETE FROM ledger_rows x
     WHERE x.id = p_id AND x.payer_org = p_org AND x.model = 'query' AND x.amount_cents = 0
       AND x.request_id IS NOT DISTINCT FROM nullif(p_request_id, '');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lsp_void_query: no query row % of % with request id %', p_id, p_org, p_request_id
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;
