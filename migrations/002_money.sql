-- Every money operation is one function call: one statement, one round trip.
--
-- Concurrency (READ COMMITTED): each function first locks the org's account row, and only then reads
-- what it decides on (holds, earlier rows). Inside a plpgsql function every statement takes a fresh
-- snapshot, so the reads after the lock see everything committed by the transaction that held it
-- before us. (A single SQL statement with a CTE would not: its snapshot predates the lock wait.)
-- Because the lock is also held while a row's identity id is drawn, an org's ledger ids commit in
-- ascending order, so paginating one org's rows by id never skips a row that commits late.

-- lsp_lock_account locks org's account row, creating it first when p_create is set. It returns a row of
-- NULLs when the account does not exist and was not to be created.
CREATE FUNCTION lsp_lock_account(p_org text, p_create boolean) RETURNS accounts
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
BEGIN
    SELECT * INTO a FROM accounts x WHERE x.org = p_org FOR NO KEY UPDATE;
    IF NOT FOUND AND p_create THEN
        INSERT INTO accounts (org) VALUES (p_org) ON CONFLICT (org) DO NOTHING;
        SELECT * INTO a FROM accounts x WHERE x.org = p_org FOR NO KEY UPDATE;
    END IF;
    RETURN a;
END
$$;

-- The helpers below are plpgsql rather than SQL functions on purpose: plpgsql keeps the plans of its
-- statements for the session, while a non-inlinable SQL function is planned again on every call.

-- lsp_live_held is the sum of an org's live, unexpired holds, optionally leaving one prepare id out.
CREATE FUNCTION lsp_live_held(p_org text, p_except text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT coalesce(sum(x.amount_cents), 0)::bigint
              FROM holds x
             WHERE x.org = p_org AND x.state = 'live' AND x.expires_at > now()
               AND x.prepare_id IS DISTINCT FROM p_except);
END
$$;

-- lsp_charged_within reports whether (tenant, repo, commit) has a charged prepare row newer than grace.
CREATE FUNCTION lsp_charged_within(p_tenant_key text, p_repo text, p_commit text, p_grace interval)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM ledger_rows r
         WHERE r.model = 'prepare' AND r.amount_cents < 0
           AND r.tenant_key = p_tenant_key AND r.repo = p_repo AND r.commit = p_commit
           AND r.created_at > now() - p_grace);
END
$$;

-- lsp_hold reserves p_price against the org's available funds under p_prepare_id.
-- o_status: 'ok' (o_amount_cents is what was held: p_price, or 0 for a re-prepare within p_grace of the
-- key's last charge, which needs no funds), 'insufficient_funds' or 'spend_cap_exceeded' (nothing held).
-- Calling it again with the same prepare id and key returns the existing hold.
CREATE FUNCTION lsp_hold(
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
        -- No account: no funds and no earlier charge.
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

    IF lsp_charged_within(p_tenant_key, p_repo, p_commit, p_grace) THEN
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
                SELECT coalesce(-sum(r.amount_cents), 0) INTO v_spent
                  FROM ledger_rows r
                 WHERE r.payer_org = p_org AND r.model = 'prepare'
                   AND r.created_at >= date_trunc('day', now(), 'UTC');
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

-- lsp_settle turns hold h into its prepare row. The caller holds the account lock and the hold's row
-- lock, and h is live or expired. The charge is the held amount, except:
--   * 0 with reason 'reprepare' when the hold was a re-prepare, or when the same key was charged
--     within the grace window after this hold was taken (two pushes racing on different shards);
--   * clamped to what the org can still pay without eating other live holds (reason 'shortfall'),
--     which can only happen to a hold captured after it expired: the balance never goes negative.
CREATE FUNCTION lsp_settle(h holds, p_subject text, p_op text, p_language text, p_request_id text,
                           p_http_status integer, p_recovered boolean) RETURNS bigint
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
    ELSIF v_charge > 0 AND lsp_charged_within(h.tenant_key, h.repo, h.commit, h.grace) THEN
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
    END IF;
    UPDATE holds SET state = 'captured', settled_at = now(), ledger_row_id = v_id
     WHERE prepare_id = h.prepare_id;
    RETURN v_id;
END
$$;

-- lsp_capture captures the hold p_prepare_id of p_org into its prepare row.
-- Returns 'captured', 'already' (captured before: nothing written), 'released', 'unknown' (no such hold
-- for this org) or 'mismatch' (the hold is for another tenant key, repo or commit; empty arguments are
-- not compared). An expired hold is still captured: a prepare that did run is charged.
CREATE FUNCTION lsp_capture(p_prepare_id text, p_org text, p_tenant_key text, p_repo text,
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
    ELSIF h.state = 'released' THEN
        RETURN 'released';
    END IF;
    PERFORM lsp_settle(h, p_subject, p_op, p_language, p_request_id, p_http_status, false);
    RETURN 'captured';
END
$$;

-- lsp_record_query writes one 0¢ query row. When p_prepare_id names a live or expired hold of the same
-- org, tenant key, repo and commit (its proxy never captured it), that hold is captured first into its
-- prepare row with reason 'recovered' (at most once: the hold leaves those states). Returns whether a
-- hold was recovered.
CREATE FUNCTION lsp_record_query(p_org text, p_tenant_key text, p_subject text, p_repo text,
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
           AND x.repo = p_repo AND x.commit = p_commit AND x.state IN ('live', 'expired')
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

-- lsp_credit adds p_cents (non-zero) to the org as a credit row. A negative credit (an adjustment) is
-- refused with 'insufficient_funds' when it would leave less than the org's live holds.
CREATE FUNCTION lsp_credit(p_org text, p_cents bigint, p_subject text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    a accounts;
BEGIN
    IF p_cents = 0 THEN
        RAISE EXCEPTION 'lsp_credit: zero amount' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    a := lsp_lock_account(p_org, p_cents > 0);
    IF p_cents < 0 AND (a.org IS NULL OR a.balance_cents + p_cents < lsp_live_held(p_org, NULL)) THEN
        RETURN 'insufficient_funds';
    END IF;
    INSERT INTO ledger_rows (kind, payer_org, subject, amount_cents)
    VALUES ('credit', p_org, nullif(p_subject, ''), p_cents);
    UPDATE accounts SET balance_cents = balance_cents + p_cents WHERE org = p_org;
    RETURN 'ok';
END
$$;

-- lsp_balance reads an org's balance and live holds from one snapshot; an unknown org is all zeros.
CREATE FUNCTION lsp_balance(p_org text, OUT o_balance_cents bigint, OUT o_held_cents bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    o_balance_cents := coalesce((SELECT a.balance_cents FROM accounts a WHERE a.org = p_org), 0);
    o_held_cents := lsp_live_held(p_org, NULL);
END
$$;

-- lsp_expire_holds marks live holds past their expiry as expired. Housekeeping only: an expired hold
-- already stopped counting at expires_at.
CREATE FUNCTION lsp_expire_holds() RETURNS integer
LANGUAGE sql AS $$
    WITH x AS (
        UPDATE holds SET state = 'expired', settled_at = now()
         WHERE state = 'live' AND expires_at <= now()
        RETURNING 1)
    SELECT count(*)::integer FROM x
$$;
