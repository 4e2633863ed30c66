-- The ledger, second pass (HIP §5): no free prepare, grace keyed by what the customer sees, and a spend
-- cap that reads a counter.
--
-- 1. The re-prepare grace is keyed by (payer org, repo, commit), never by the tenant key: the key is an
--    HMAC of a secret that can rotate, and rotating it must not charge every revision of the last day
--    again. The tenant's own DELETE /workspaces ends that revision's grace (grace_ends), so one charge
--    no longer buys unlimited delete-and-prepare cycles.
-- 2. A released hold can still be captured. The proxy releases a hold only when the daemon said the
--    workspace key is neither written nor in flight; should a prepare still publish under a released
--    hold's id (a race the daemon cannot rule out), the first answer naming that id captures it, with
--    the shortfall rule (the funds were given back, so the charge is what the org can still pay).
-- 3. The daily spend cap reads a per-(org, UTC day) counter kept by lsp_settle, not a scan of every
--    prepare row under the account lock.

-- 1. Grace.
DROP INDEX ledger_rows_charged_prepare;
CREATE INDEX ledger_rows_grace ON ledger_rows (payer_org, repo, commit, created_at)
    WHERE model = 'prepare' AND amount_cents < 0;

-- Each time a tenant deleted a revision's workspace: charges before it no longer make a re-prepare
-- free. Append-only, so that reconcile can tell a second charge inside the window from one after an end.
CREATE TABLE grace_ends (
    org      text        NOT NULL CHECK (org <> ''),
    repo     text        NOT NULL,
    commit   text        NOT NULL,
    ended_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX grace_ends_key ON grace_ends (org, repo, commit, ended_at);

DROP FUNCTION lsp_charged_within(text, text, text, interval);

-- lsp_charged_within reports whether (org, repo, commit) has a charged prepare row newer than grace and
-- newer than the last end of its grace (a DELETE /workspaces by the tenant).
CREATE FUNCTION lsp_charged_within(p_org text, p_repo text, p_commit text, p_grace interval)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_since timestamptz := now() - p_grace;
    v_ended timestamptz;
BEGIN
    SELECT max(g.ended_at) INTO v_ended FROM grace_ends g
     WHERE g.org = p_org AND g.repo = p_repo AND g.commit = p_commit;
    IF v_ended IS NOT NULL AND v_ended > v_since THEN
        v_since := v_ended;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM ledger_rows r
         WHERE r.model = 'prepare' AND r.amount_cents < 0
           AND r.payer_org = p_org AND r.repo = p_repo AND r.commit = p_commit
           AND r.created_at > v_since);
END
$$;

-- lsp_end_grace ends the grace of (org, repo, commit) now: the next prepare of it is charged.
CREATE FUNCTION lsp_end_grace(p_org text, p_repo text, p_commit text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO grace_ends (org, repo, commit) VALUES (p_org, p_repo, p_commit);
$$;

-- 3. The spend counter: prepare cents charged per org and UTC day.
CREATE TABLE spend_daily (
    org   text   NOT NULL,
    day   date   NOT NULL,
    cents bigint NOT NULL CHECK (cents >= 0),
    PRIMARY KEY (org, day)
);
INSERT INTO spend_daily (org, day, cents)
SELECT payer_org, (created_at AT TIME ZONE 'UTC')::date, -sum(amount_cents)
  FROM ledger_rows
 WHERE model = 'prepare' AND amount_cents < 0
 GROUP BY 1, 2;

CREATE OR REPLACE FUNCTION lsp_hold(
    p_prepare_id text, p_org text, p_tenant_key text, p_subject text, p_repo text, p_commit text,
    p_request_id text, p_price bigint, p_ttl interval, p_grace interval,
    OUT o_status text, OUT o_amount_cents bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a           accounts;
    h           holds;
    v_held      bigint;
    v_spent     bigint;
    v_reprepare boolean := false;
BEGIN
    IF p_price < 0 OR p_ttl <= interval '0' OR p_grace < interval '0' THEN
        RAISE EXCEPTION 'lsp_hold: bad price, ttl or grace' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    a := lsp_lock_account(p_org, p_price = 0);
    IF a.org IS NULL THEN
        o_status := 'insufficient_funds';
        o_amount_cents := p_price;
        RETURN;
    END IF;

    SELECT * INTO h FROM holds x WHERE x.prepare_id = p_prepare_id;
    IF FOUND THEN
        IF h.org = p_org AND h.tenant_key = p_tenant_key AND h.repo = p_repo AND h.commit = p_commit THEN
            o_status := 'ok';
            o_amount_cents := h.amount_cents;
            RETURN;
        END IF;
        RAISE EXCEPTION 'lsp_hold: prepare id already used for another workspace'
            USING ERRCODE = 'unique_violation';
    END IF;

    IF lsp_charged_within(p_org, p_repo, p_commit, p_grace) THEN
        v_reprepare := true;
        o_amount_cents := 0;
    ELSE
        o_amount_cents := p_price;
        IF p_price > 0 THEN
            v_held := lsp_live_held(p_org, NULL);
            IF a.balance_cents - v_held < p_price THEN
                o_status := 'insufficient_funds';
                RETURN;
            END IF;
            IF a.daily_cap_cents IS NOT NULL THEN
                SELECT coalesce(max(s.cents), 0) INTO v_spent
                  FROM spend_daily s
                 WHERE s.org = p_org AND s.day = (now() AT TIME ZONE 'UTC')::date;
                IF v_spent + v_held + p_price > a.daily_cap_cents THEN
                    o_status := 'spend_cap_exceeded';
                    RETURN;
                END IF;
            END IF;
        END IF;
    END IF;

    INSERT INTO holds (prepare_id, org, tenant_key, subject, repo, commit, request_id,
                       amount_cents, reprepare, grace, expires_at)
    VALUES (p_prepare_id, p_org, p_tenant_key, nullif(p_subject, ''), p_repo, p_commit,
            nullif(p_request_id, ''), o_amount_cents, v_reprepare, p_grace, now() + p_ttl);
    o_status := 'ok';
END
$$;

-- lsp_settle as before, with the grace keyed by (org, repo, commit) and the spend counter kept. A hold
-- that was released is captured with reason 'recovered' or 'shortfall' like an expired one: its funds
-- were given back, so the charge is clamped to what the org can pay without eating other live holds.
CREATE OR REPLACE FUNCTION lsp_settle(h holds, p_subject text, p_op text, p_language text,
                                      p_request_id text, p_http_status integer, p_recovered boolean)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_charge  bigint := h.amount_cents;
    v_reason  text;
    v_balance bigint;
    v_room    bigint;
    v_id      bigint;
BEGIN
    IF h.reprepare THEN
        v_reason := 'reprepare';
    ELSIF v_charge > 0 AND lsp_charged_within(h.org, h.repo, h.commit, h.grace) THEN
        v_charge := 0;
        v_reason := 'reprepare';
    END IF;
    IF v_charge > 0 THEN
        SELECT a.balance_cents INTO v_balance FROM accounts a WHERE a.org = h.org;
        v_room := v_balance - lsp_live_held(h.org, h.prepare_id);
        IF v_room < v_charge THEN
            v_charge := greatest(v_room, 0);
            v_reason := 'shortfall';
        END IF;
    END IF;
    IF v_reason IS NULL AND p_recovered THEN
        v_reason := 'recovered';
    END IF;

    INSERT INTO ledger_rows (kind, model, payer_org, tenant_key, subject, repo, commit, op, language,
                             amount_cents, http_status, request_id, prepare_id, reason)
    VALUES ('lsp', 'prepare', h.org, h.tenant_key, coalesce(nullif(p_subject, ''), h.subject), h.repo,
            h.commit, nullif(p_op, ''), nullif(p_language, ''), -v_charge, nullif(p_http_status, 0),
            coalesce(nullif(p_request_id, ''), h.request_id), h.prepare_id, v_reason)
    RETURNING id INTO v_id;
    IF v_charge <> 0 THEN
        UPDATE accounts SET balance_cents = balance_cents - v_charge WHERE org = h.org;
        INSERT INTO spend_daily (org, day, cents)
        VALUES (h.org, (now() AT TIME ZONE 'UTC')::date, v_charge)
        ON CONFLICT (org, day) DO UPDATE SET cents = spend_daily.cents + excluded.cents;
    END IF;
    UPDATE holds SET state = 'captured', settled_at = now(), ledger_row_id = v_id
     WHERE prepare_id = h.prepare_id;
    RETURN v_id;
END
$$;

-- 2. lsp_capture: a released hold is captured too (reason 'recovered' unless the shortfall or grace
-- rule names another): the daemon published the tree after all. Returns 'captured', 'already',
-- 'unknown' or 'mismatch'; 'released' is no longer returned.
CREATE OR REPLACE FUNCTION lsp_capture(p_prepare_id text, p_org text, p_tenant_key text, p_repo text,
                                       p_commit text, p_subject text, p_op text, p_language text,
                                       p_request_id text, p_http_status integer) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
    h holds;
BEGIN
    a := lsp_lock_account(p_org, false);
    IF a.org IS NULL THEN
        RETURN 'unknown';
    END IF;
    SELECT * INTO h FROM holds x WHERE x.prepare_id = p_prepare_id AND x.org = p_org FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    IF (p_tenant_key <> '' AND h.tenant_key <> p_tenant_key) OR (p_repo <> '' AND h.repo <> p_repo)
       OR (p_commit <> '' AND h.commit <> p_commit) THEN
        RETURN 'mismatch';
    END IF;
    IF h.state = 'captured' THEN
        RETURN 'already';
    END IF;
    PERFORM lsp_settle(h, p_subject, p_op, p_language, p_request_id, p_http_status, h.state = 'released');
    RETURN 'captured';
END
$$;

-- 2. Query rows capture a released hold their answer names, as they capture a live or expired one.
CREATE OR REPLACE FUNCTION lsp_record_query(p_org text, p_tenant_key text, p_subject text, p_repo text,
                                 p_commit text, p_op text, p_language text, p_request_id text,
                                 p_http_status integer, p_prepare_id text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    a           accounts;
    h           holds;
    v_recovered boolean := false;
BEGIN
    a := lsp_lock_account(p_org, true);
    IF p_prepare_id <> '' THEN
        SELECT * INTO h FROM holds x
         WHERE x.prepare_id = p_prepare_id AND x.org = p_org AND x.tenant_key = p_tenant_key
           AND x.repo = p_repo AND x.commit = p_commit AND x.state IN ('live', 'expired', 'released')
           FOR UPDATE;
        IF FOUND THEN
            -- The prepare row describes the request that prepared (from the hold), not this one.
            PERFORM lsp_settle(h, '', '', '', '', NULL, true);
            v_recovered := true;
        END IF;
    END IF;
    INSERT INTO ledger_rows (kind, model, payer_org, tenant_key, subject, repo, commit, op, language,
                             amount_cents, http_status, request_id, prepare_id)
    VALUES ('lsp', 'query', p_org, nullif(p_tenant_key, ''), nullif(p_subject, ''), nullif(p_repo, ''),
            nullif(p_commit, ''), nullif(p_op, ''), nullif(p_language, ''), 0, nullif(p_http_status, 0),
            nullif(p_request_id, ''), nullif(p_prepare_id, ''));
    RETURN v_recovered;
END
$$;

CREATE OR REPLACE FUNCTION lsp_record_queries(p_org text[], p_tenant_key text[], p_subject text[], p_repo text[],
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
    IF EXISTS (SELECT 1 FROM holds x WHERE x.prepare_id = ANY (p_prepare_id) AND x.state IN ('live', 'expired', 'released')) THEN
        FOR h IN
            SELECT x.* FROM holds x
             WHERE x.prepare_id = ANY (p_prepare_id) AND x.state IN ('live', 'expired', 'released')
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

CREATE OR REPLACE FUNCTION lsp_record_queries_ids(p_org text[], p_tenant_key text[], p_subject text[], p_repo text[],
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

    IF EXISTS (SELECT 1 FROM holds x WHERE x.prepare_id = ANY (p_prepare_id) AND x.state IN ('live', 'expired', 'released')) THEN
        FOR h IN
            SELECT x.* FROM holds x
             WHERE x.prepare_id = ANY (p_prepare_id) AND x.state IN ('live', 'expired', 'released')
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

CREATE OR REPLACE FUNCTION lsp_amend_query(p_id bigint, p_org text, p_request_id text, p_language text,
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
           AND x.repo = r.repo AND x.commit = r.commit AND x.state IN ('live', 'expired', 'released')
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
