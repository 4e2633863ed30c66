-- The ledger's tables. Money is in integer cents; amount_cents on a ledger row is signed
-- (credit +, prepare −price, query 0) and an org's balance is the sum of its rows.

-- One row per org that ever had a ledger row or a hold. balance_cents is a cache of
-- sum(ledger_rows.amount_cents) for the org, maintained by the lsp_* functions in the same
-- transaction as every row insert; the row is also the org's lock: every money operation locks it
-- first, which serialises an org's operations and allocates its ledger ids in commit order.
CREATE TABLE accounts (
    org             text        PRIMARY KEY CHECK (org <> ''),
    balance_cents   bigint      NOT NULL DEFAULT 0 CHECK (balance_cents >= 0),
    -- NULL: no cap. Otherwise prepare charges (captured and held) per UTC day may not exceed it.
    daily_cap_cents bigint      CHECK (daily_cap_cents >= 0),
    created_at      timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50); -- room for HOT updates of the hot balance column

-- A hold reserves the prepare price before any work; its key is the prepare id that travels with the
-- tree to the daemon. A hold counts against available funds while state = 'live' and
-- expires_at > now(); nothing else has to run for an expired hold to stop counting.
CREATE TABLE holds (
    prepare_id    text        PRIMARY KEY CHECK (prepare_id <> '' AND length(prepare_id) <= 128),
    org           text        NOT NULL REFERENCES accounts (org),
    tenant_key    text        NOT NULL,
    subject       text,
    repo          text        NOT NULL,
    commit        text        NOT NULL,
    request_id    text,
    amount_cents  bigint      NOT NULL CHECK (amount_cents >= 0),
    -- true when the hold was taken at 0¢ because the same (tenant, repo, commit) was charged
    -- within the grace window.
    reprepare     boolean     NOT NULL DEFAULT false,
    grace         interval    NOT NULL,
    -- live: reserved; captured: turned into its prepare row; released: the push did not prepare;
    -- expired: housekeeping marked a live hold past expires_at (it may still be captured if the
    -- prepare turns out to have run).
    state         text        NOT NULL DEFAULT 'live'
                              CHECK (state IN ('live', 'captured', 'released', 'expired')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    settled_at    timestamptz,
    ledger_row_id bigint
);

-- Sum of an org's live holds without touching the heap for settled ones.
CREATE INDEX holds_live_org ON holds (org, expires_at) INCLUDE (amount_cents) WHERE state = 'live';
CREATE INDEX holds_expired_live ON holds (expires_at) WHERE state = 'live';

-- The ledger. One row per operation request that reached the daemon (model prepare or query) and
-- one per credit. Rows are never updated except to fill http_status once the answer is known.
CREATE TABLE ledger_rows (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text        NOT NULL CHECK (kind IN ('lsp', 'credit')),
    model        text        CHECK (model IN ('prepare', 'query')),
    -- No foreign key to accounts: every writer (the lsp_* functions) locks or creates the account
    -- row first anyway, and the key check would cost a third of a warm query's insert.
    payer_org    text        NOT NULL,
    tenant_key   text,
    subject      text,
    repo         text,
    commit       text,
    op           text,
    language     text,
    amount_cents bigint      NOT NULL,
    http_status  integer     CHECK (http_status BETWEEN 100 AND 599),
    request_id   text,
    prepare_id   text,
    -- why a row is unusual: 'reprepare' (0¢, charged within the grace window), 'recovered' (a prepare
    -- captured from a later answer after its proxy lost the reply), 'shortfall' (a late capture charged
    -- less than its hold because the funds had gone meanwhile).
    reason       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_rows_kind_model CHECK ((kind = 'lsp') = (model IS NOT NULL)),
    CONSTRAINT ledger_rows_query_free CHECK (model IS DISTINCT FROM 'query' OR amount_cents = 0),
    CONSTRAINT ledger_rows_prepare_charge
        CHECK (model IS DISTINCT FROM 'prepare' OR (amount_cents <= 0 AND prepare_id IS NOT NULL)),
    CONSTRAINT ledger_rows_credit_nonzero CHECK (kind <> 'credit' OR amount_cents <> 0)
);

-- Exactly one prepare row per prepare id, whatever retries or recoveries happen.
CREATE UNIQUE INDEX ledger_rows_prepare_id ON ledger_rows (prepare_id) WHERE model = 'prepare';
-- Dashboards: an org's rows by id (pagination) and by time.
CREATE INDEX ledger_rows_payer_id ON ledger_rows (payer_org, id);
CREATE INDEX ledger_rows_payer_created ON ledger_rows (payer_org, created_at);
-- The re-prepare grace check: was (tenant, repo, commit) charged recently?
CREATE INDEX ledger_rows_charged_prepare ON ledger_rows (tenant_key, repo, commit, created_at)
    WHERE model = 'prepare' AND amount_cents < 0;
