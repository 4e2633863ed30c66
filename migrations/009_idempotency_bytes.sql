-- Stored answers are bounded per org (CONTRACT §5's Idempotency-Key). Without a bound, an org sending
-- keyed requests makes the ledger keep up to a MiB per request for a day: its rate limit times a
-- day times a MiB. idempotency_bytes counts the bytes of the answers each org's keys hold (expired
-- ones too, until they are deleted), kept by a trigger in the same transaction as every change of a
-- key's answer, so it is exact under any concurrency.
CREATE TABLE idempotency_bytes (
    org   text   PRIMARY KEY,
    bytes bigint NOT NULL CHECK (bytes >= 0)
);

INSERT INTO idempotency_bytes (org, bytes)
SELECT org, sum(octet_length(body)) FROM idempotency_keys WHERE body IS NOT NULL GROUP BY org;

CREATE FUNCTION lsp_idem_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d bigint;
    o text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        o := NEW.org;
        d := coalesce(octet_length(NEW.body), 0);
    ELSIF TG_OP = 'DELETE' THEN
        o := OLD.org;
        d := -coalesce(octet_length(OLD.body), 0);
    ELSE -- UPDATE; a key's org never changes
        o := NEW.org;
        d := coalesce(octet_length(NEW.body), 0) - coalesce(octet_length(OLD.body), 0);
    END IF;
    -- A negative change updates the row its bytes were counted in (an INSERT's CHECK would see
    -- the negative row it proposes before the conflict).
    IF d > 0 THEN
        INSERT INTO idempotency_bytes AS b (org, bytes) VALUES (o, d)
        ON CONFLICT (org) DO UPDATE SET bytes = b.bytes + EXCLUDED.bytes;
    ELSIF d < 0 THEN
        UPDATE idempotency_bytes SET bytes = bytes + d WHERE org = o;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER idempotency_keys_bytes AFTER INSERT OR DELETE OR UPDATE OF body ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION lsp_idem_count();

-- An org at its bound deletes its own expired keys first.
CREATE INDEX idempotency_keys_org_expires ON idempotency_keys (org, expires_at);

-- lsp_idem_claim is lsp_idem_begin under the org's bound (p_max_bytes; 0: none). An org whose keys
-- hold p_max_bytes or more, expired ones deleted, may not claim a new key: 'full' (429). A key it
-- already holds still answers as lsp_idem_begin does: a replay, a mismatch, a retry of an attempt
-- in flight. Attempts running at once may each store up to the answer bound past it: the overshoot
-- is bounded by the org's requests in flight.
CREATE FUNCTION lsp_idem_claim(p_org text, p_key text, p_hash text, p_attempt text, p_ttl interval,
                               p_lease interval, p_max_bytes bigint, OUT o_state text,
                               OUT o_http_status integer, OUT o_headers jsonb, OUT o_body bytea)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_max_bytes > 0
       AND coalesce((SELECT b.bytes FROM idempotency_bytes b WHERE b.org = p_org), 0) >= p_max_bytes
       AND NOT EXISTS (SELECT 1 FROM idempotency_keys x
                        WHERE x.org = p_org AND x.key = p_key AND x.expires_at > now()) THEN
        DELETE FROM idempotency_keys x WHERE x.org = p_org AND x.expires_at <= now();
        IF coalesce((SELECT b.bytes FROM idempotency_bytes b WHERE b.org = p_org), 0) >= p_max_bytes THEN
            o_state := 'full';
            RETURN;
        END IF;
    END IF;
    SELECT b.o_state, b.o_http_status, b.o_headers, b.o_body
      INTO o_state, o_http_status, o_headers, o_body
      FROM lsp_idem_begin(p_org, p_key, p_hash, p_attempt, p_ttl, p_lease) b;
END
$$;
