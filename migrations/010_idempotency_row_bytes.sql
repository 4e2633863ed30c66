-- idempotency_bytes (009) counted only the bodies of stored answers: a key's row and its headers
-- cost nothing, so an org sending many keyed requests with small answers (a free warm answer is ~100
-- bytes) kept millions of rows a day, most of their size uncounted. From here each answered row costs
-- what lsp_idem_row_bytes says: a fixed overhead, its key, its headers (as text) and its body.
--
-- A key in flight (no answer yet) still costs nothing, as in 009, and that is for the locks: the
-- count is a row per org, and a claim that had to update it when it inserts its key would take that
-- lock after its sweep of expired keys had taken others' (the sweep deletes any org's, and an
-- answered key's deletion updates its org's count) and while another claim of the same key waits
-- on its insert: two claims could each wait for the other. Keys in flight are bounded by their lease
-- and by the org's requests in flight.
--
-- The overhead, 256 bytes, is a round estimate of what a row takes besides its key, headers and body.
-- Heap, about 180: line pointer 4, tuple header 24, org ~8, request_hash 65 (hex SHA-256), attempt 33
-- (32 hex), state ~10, http_status 4, created_at, lease_until, expires_at 24, alignment. Index
-- entries, about 80 at full pages: (org, key) 12 + org (its key is the row's key again),
-- (expires_at) 20, (org, expires_at) 12 + org + 8, each with its line pointer. Measured on Postgres
-- 15 (100,000 in-flight rows, 6-byte orgs, pages as filled by random inserts), a row took about 300
-- besides its key; 256 errs a little low: the bound keeps an org's keys from growing without end,
-- it does not measure the disk exactly (free space, dead rows and TOAST are not counted either).
-- The key counts once, though the primary key's index holds it again.
--
-- Locks: every claim writes idempotency_keys (its sweep, its insert), so the migration blocks them
-- all while it runs, and DROP TRIGGER takes ACCESS EXCLUSIVE anyway. Taking that lock before this
-- file touches the table means no row changes between the recount below and the new trigger: the
-- recount is exact. On a database at 008 or older, 009 runs in the same transaction and has locked
-- the table more weakly already, so this is an upgrade: a claim from an older proxy during a rolling
-- deploy may then deadlock with it, Postgres aborts one of the two, and an aborted migration is
-- retried at the proxy's next start.
LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE;

-- What one idempotency_keys row costs its org, in bytes. The one definition the trigger and the
-- recount share.
CREATE FUNCTION lsp_idem_row_bytes(p_key text, p_headers jsonb, p_body bytea) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_body IS NULL THEN 0 -- in flight (above)
                ELSE 256 + octet_length(p_key)::bigint + coalesce(octet_length(p_headers::text), 0)
                     + octet_length(p_body) END
$$;

-- lsp_idem_add_bytes adds p_delta to p_org's count. A negative change updates the row the bytes
-- were counted in (an INSERT's CHECK would see the negative row it proposes before the conflict).
CREATE FUNCTION lsp_idem_add_bytes(p_org text, p_delta bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_delta > 0 THEN
        INSERT INTO idempotency_bytes AS b (org, bytes) VALUES (p_org, p_delta)
        ON CONFLICT (org) DO UPDATE SET bytes = b.bytes + EXCLUDED.bytes;
    ELSIF p_delta < 0 THEN
        UPDATE idempotency_bytes SET bytes = bytes + p_delta WHERE org = p_org;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION lsp_idem_count() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM lsp_idem_add_bytes(NEW.org, lsp_idem_row_bytes(NEW.key, NEW.headers, NEW.body));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM lsp_idem_add_bytes(OLD.org, -lsp_idem_row_bytes(OLD.key, OLD.headers, OLD.body));
    ELSIF NEW.org = OLD.org THEN
        PERFORM lsp_idem_add_bytes(NEW.org, lsp_idem_row_bytes(NEW.key, NEW.headers, NEW.body)
                                            - lsp_idem_row_bytes(OLD.key, OLD.headers, OLD.body));
    ELSE -- no function moves a key to another org; were one to, each org's count stays right
        PERFORM lsp_idem_add_bytes(OLD.org, -lsp_idem_row_bytes(OLD.key, OLD.headers, OLD.body));
        PERFORM lsp_idem_add_bytes(NEW.org, lsp_idem_row_bytes(NEW.key, NEW.headers, NEW.body));
    END IF;
    RETURN NULL;
END
$$;

-- 009's trigger fired on UPDATE OF body only; the cost now also follows headers (and key and org,
-- which no function changes). An update of only the lease, attempt or expiry still fires nothing.
DROP TRIGGER idempotency_keys_bytes ON idempotency_keys;
CREATE TRIGGER idempotency_keys_bytes AFTER INSERT OR DELETE OR UPDATE OF org, key, headers, body
    ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION lsp_idem_count();

-- Recount every org from its rows under the lock. The old counts are deleted, not adjusted, so the
-- CHECK (bytes >= 0) holds at every step; an org with no rows is left with no count (0).
DELETE FROM idempotency_bytes;
INSERT INTO idempotency_bytes (org, bytes)
SELECT org, sum(lsp_idem_row_bytes(key, headers, body)) FROM idempotency_keys GROUP BY org;
