-- Idempotency-Key records (CONTRACT §5). A key is scoped to the payer org and bound to a hash of the
-- request's route and body; it lives 24 hours from its first use. While the first attempt runs, the
-- record is 'in_flight' and names that attempt; once the answer is known it is 'done' and holds the
-- answer (status, the headers that matter, the body) so that a replay is byte for byte the same.
--
-- An attempt whose proxy died leaves its record in flight: after lease_until a retry with the same
-- body takes it over. The lease is as long as a hold lives, so a takeover never runs next to a push
-- the dead attempt started (whose hold would still count).
CREATE TABLE idempotency_keys (
    org          text        NOT NULL CHECK (org <> ''),
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text        NOT NULL CHECK (request_hash <> ''),
    state        text        NOT NULL DEFAULT 'in_flight' CHECK (state IN ('in_flight', 'done')),
    attempt      text        NOT NULL CHECK (attempt <> ''),
    http_status  integer     CHECK (http_status BETWEEN 100 AND 599),
    headers      jsonb,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (org, key),
    CONSTRAINT idempotency_keys_done_answer
        CHECK (state <> 'done' OR (http_status IS NOT NULL AND body IS NOT NULL))
);

-- The sweep of expired records.
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

-- lsp_idem_begin claims (p_org, p_key) for attempt p_attempt, or says why it cannot:
--   'claimed'     the caller runs the request and then stores its answer (lsp_idem_finish) or gives
--                 the key back (lsp_idem_abandon);
--   'replay'      the answer is stored: o_http_status, o_headers, o_body;
--   'mismatch'    the key was used with another route or body (422 idempotency_key_reused);
--   'in_progress' another attempt holds it (409 idempotency_in_progress).
-- An expired record frees its key whatever it held. Each call also deletes a few expired records, so
-- the table stays about one day of keys without a housekeeping job.
CREATE FUNCTION lsp_idem_begin(p_org text, p_key text, p_hash text, p_attempt text, p_ttl interval,
                               p_lease interval, OUT o_state text, OUT o_http_status integer,
                               OUT o_headers jsonb, OUT o_body bytea)
LANGUAGE plpgsql AS $$
DECLARE
    r idempotency_keys;
BEGIN
    IF p_ttl <= interval '0' OR p_lease <= interval '0' THEN
        RAISE EXCEPTION 'lsp_idem_begin: bad ttl or lease' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM idempotency_keys
     WHERE ctid IN (SELECT x.ctid FROM idempotency_keys x WHERE x.expires_at <= now()
                     LIMIT 4 FOR UPDATE SKIP LOCKED);

    -- Two attempts at once: one inserts, the other's insert waits for it and then does nothing.
    INSERT INTO idempotency_keys (org, key, request_hash, attempt, lease_until, expires_at)
    VALUES (p_org, p_key, p_hash, p_attempt, now() + p_lease, now() + p_ttl)
    ON CONFLICT (org, key) DO NOTHING;
    IF FOUND THEN
        o_state := 'claimed';
        RETURN;
    END IF;

    SELECT * INTO r FROM idempotency_keys x WHERE x.org = p_org AND x.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        -- Given back (or swept) between our insert and this read: the key is free.
        INSERT INTO idempotency_keys (org, key, request_hash, attempt, lease_until, expires_at)
        VALUES (p_org, p_key, p_hash, p_attempt, now() + p_lease, now() + p_ttl)
        ON CONFLICT (org, key) DO NOTHING;
        o_state := CASE WHEN FOUND THEN 'claimed' ELSE 'in_progress' END;
        RETURN;
    END IF;

    IF r.expires_at <= now() THEN
        UPDATE idempotency_keys
           SET request_hash = p_hash, state = 'in_flight', attempt = p_attempt, http_status = NULL,
               headers = NULL, body = NULL, created_at = now(), lease_until = now() + p_lease,
               expires_at = now() + p_ttl
         WHERE org = p_org AND key = p_key;
        o_state := 'claimed';
        RETURN;
    END IF;
    IF r.request_hash <> p_hash THEN
        o_state := 'mismatch';
        RETURN;
    END IF;
    IF r.state = 'done' THEN
        o_state := 'replay';
        o_http_status := r.http_status;
        o_headers := r.headers;
        o_body := r.body;
        RETURN;
    END IF;
    IF r.lease_until <= now() THEN
        -- The attempt's proxy died without an answer: this retry runs it.
        UPDATE idempotency_keys SET attempt = p_attempt, lease_until = now() + p_lease
         WHERE org = p_org AND key = p_key;
        o_state := 'claimed';
        RETURN;
    END IF;
    o_state := 'in_progress';
END
$$;

-- lsp_idem_finish stores the answer of the attempt that holds the key. False when it no longer does
-- (its lease lapsed and a retry took the key over): nothing is written then.
CREATE FUNCTION lsp_idem_finish(p_org text, p_key text, p_attempt text, p_http_status integer,
                                p_headers jsonb, p_body bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE idempotency_keys
       SET state = 'done', http_status = p_http_status, headers = p_headers, body = p_body
     WHERE org = p_org AND key = p_key AND attempt = p_attempt AND state = 'in_flight';
    RETURN FOUND;
END
$$;

-- lsp_idem_abandon gives the key back: the attempt ended with nothing done that a retry could repeat
-- (no hold, no row), so a retry runs afresh.
CREATE FUNCTION lsp_idem_abandon(p_org text, p_key text, p_attempt text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM idempotency_keys
     WHERE org = p_org AND key = p_key AND attempt = p_attempt AND state = 'in_flight';
    RETURN FOUND;
END
$$;
