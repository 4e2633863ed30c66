package ledger

import (
	"encoding/csv"
	"io"
	"strconv"
	"strings"
	"time"
)

// CSVColumns are the columns of a ledger export, in order (GET /v1/lsp/ledger with Accept: text/csv,
// `lspctl ledger rows --csv`). Empty cells are NULL; times are RFC 3339 in UTC.
var CSVColumns = []string{
	"id", "created_at", "kind", "model", "payer_org", "subject", "repo", "commit", "op", "language",
	"amount_cents", "http_status", "request_id", "prepare_id", "reason", "tenant_key",
}

// FormulaSafe makes a text cell inert in spreadsheets: a cell starting with = + - @ TAB or CR would be
// read as a formula, so it gets a leading single quote — also when spaces or quote characters come
// first, which some spreadsheets trim or skip on import (" =HYPERLINK(…)", "\"=1"). Numbers the
// ledger formats itself (id, amount_cents, http_status) are not text and are written as they are, so
// "-2" stays a number.
func FormulaSafe(s string) string {
	if t := strings.TrimLeft(s, " \"'"); t != "" && strings.ContainsRune("=+-@\t\r", rune(t[0])) {
		return "'" + s
	}
	return s
}

// CSVWriter writes ledger rows as CSV.
type CSVWriter struct {
	w *csv.Writer
}

// NewCSVWriter starts a CSV export on w; header writes the column names first.
func NewCSVWriter(w io.Writer, header bool) (*CSVWriter, error) {
	c := &CSVWriter{w: csv.NewWriter(w)}
	if header {
		if err := c.w.Write(CSVColumns); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Write writes rows.
func (c *CSVWriter) Write(rows []LedgerRow) error {
	rec := make([]string, len(CSVColumns))
	for _, r := range rows {
		status := ""
		if r.HTTPStatus != 0 {
			status = strconv.Itoa(r.HTTPStatus)
		}
		rec = append(rec[:0],
			strconv.FormatInt(r.ID, 10),
			r.CreatedAt.UTC().Format(time.RFC3339Nano),
			FormulaSafe(r.Kind),
			FormulaSafe(r.Model),
			FormulaSafe(r.PayerOrg),
			FormulaSafe(r.Subject),
			FormulaSafe(r.Repo),
			FormulaSafe(r.Commit),
			FormulaSafe(r.Op),
			FormulaSafe(r.Language),
			strconv.FormatInt(r.AmountCents, 10),
			status,
			FormulaSafe(r.RequestID),
			FormulaSafe(r.PrepareID),
			FormulaSafe(r.Reason),
			FormulaSafe(r.TenantKey),
		)
		if err := c.w.Write(rec); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes what is buffered and reports any write error.
func (c *CSVWriter) Flush() error {
	c.w.Flush()
	return c.w.Error()
}
