-- Documented, read-only views for dashboards. They run with their owner's rights, so the read-only
-- role needs SELECT on them only, never on the tables.

CREATE VIEW v_ledger_rows AS
SELECT id, kind, model, payer_org, tenant_key, subject, repo, commit, op, language, amount_cents,
       http_status, request_id, prepare_id, reason, created_at
  FROM ledger_rows;

CREATE VIEW v_balances AS
SELECT a.org,
       a.balance_cents,
       coalesce(h.held, 0)::bigint                     AS held_cents,
       a.balance_cents - coalesce(h.held, 0)::bigint   AS available_cents,
       a.daily_cap_cents,
       a.created_at
  FROM accounts a
  LEFT JOIN (SELECT org, sum(amount_cents) AS held
               FROM holds
              WHERE state = 'live' AND expires_at > now()
              GROUP BY org) h ON h.org = a.org;

CREATE VIEW v_holds AS
SELECT prepare_id, org, tenant_key, subject, repo, commit, request_id, amount_cents, reprepare,
       CASE WHEN state = 'live' AND expires_at <= now() THEN 'expired' ELSE state END AS state,
       created_at, expires_at, settled_at, ledger_row_id
  FROM holds;
