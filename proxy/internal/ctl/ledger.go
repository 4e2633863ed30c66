package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hanzoai/lsp/proxy/internal/ledger"
)

// ledgerCmd is `lspctl ledger credit|balance|cap|rows|reconcile`.
func ledgerCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError("ledger: want credit, balance, cap, rows or reconcile")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("ledger "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is reported once, by Main
	var run func(context.Context, *ledger.Ledger) error
	switch sub {
	case "credit":
		org := fs.String("org", "", "the org")
		cents := fs.Int64("cents", 0, "cents to credit (positive)")
		subject := fs.String("subject", "lspctl", "who credits, for the row")
		run = func(ctx context.Context, l *ledger.Ledger) error {
			if *org == "" {
				return usageError("--org is required")
			}
			if *cents <= 0 {
				return usageError("--cents must be positive")
			}
			if err := l.Credit(ctx, *org, *cents, *subject); err != nil {
				return err
			}
			return printBalance(ctx, l, *org, stdout)
		}
	case "balance":
		org := fs.String("org", "", "the org")
		run = func(ctx context.Context, l *ledger.Ledger) error {
			if *org == "" {
				return usageError("--org is required")
			}
			return printBalance(ctx, l, *org, stdout)
		}
	case "cap":
		org := fs.String("org", "", "the org")
		cents := fs.String("cents", "", "the most the org may spend on prepares per UTC day, or none")
		run = func(ctx context.Context, l *ledger.Ledger) error {
			if *org == "" {
				return usageError("--org is required")
			}
			n, err := parseCap(*cents)
			if err != nil {
				return err
			}
			if err := l.SetDailyCap(ctx, *org, n); err != nil {
				return err
			}
			if n < 0 {
				_, err = fmt.Fprintf(stdout, "org=%s daily_cap_cents=none\n", *org)
			} else {
				_, err = fmt.Fprintf(stdout, "org=%s daily_cap_cents=%d\n", *org, n)
			}
			return err
		}
	case "rows":
		f := ledger.RowFilter{}
		fs.StringVar(&f.Org, "org", "", "the org")
		from := fs.String("from", "", "only rows created at or after this time (RFC 3339)")
		to := fs.String("to", "", "only rows created before this time (RFC 3339)")
		fs.StringVar(&f.Model, "model", "", "only prepare, query or credit rows")
		fs.StringVar(&f.Repo, "repo", "", "only rows of this repository")
		fs.Int64Var(&f.AfterID, "after", 0, "only rows with an id above this")
		limit := fs.Int("limit", 0, "at most this many rows (0: all)")
		asCSV := fs.Bool("csv", false, "CSV with the documented columns instead of a table")
		run = func(ctx context.Context, l *ledger.Ledger) error {
			if f.Org == "" {
				return usageError("--org is required")
			}
			var err error
			if f.From, err = parseTime("--from", *from); err != nil {
				return err
			}
			if f.To, err = parseTime("--to", *to); err != nil {
				return err
			}
			switch f.Model {
			case "", "prepare", "query", "credit":
			default:
				return usageError("--model must be prepare, query or credit")
			}
			if *limit < 0 {
				return usageError("--limit must not be negative")
			}
			return printRows(ctx, l, f, *limit, *asCSV, stdout)
		}
	case "reconcile":
		margin := fs.Duration("margin", time.Hour, "a live or expired hold this long past its expiry is orphaned")
		settle := fs.Duration("settle", ledger.DefaultUsageSettle, "check rows once this old (younger ids may still commit)")
		restart := fs.Bool("restart", false, "check every row again, not only those past the watermark")
		run = func(ctx context.Context, l *ledger.Ledger) error {
			return reconcile(ctx, l, ledger.ReconcileOptions{Margin: *margin, Settle: *settle, Restart: *restart}, stdout)
		}
	default:
		return usageError("ledger: unknown subcommand " + strconv.Quote(sub))
	}
	if err := fs.Parse(args); err != nil {
		return usageError("ledger " + sub + ": " + err.Error())
	}
	if fs.NArg() > 0 {
		return usageError("ledger " + sub + ": unexpected argument " + strconv.Quote(fs.Arg(0)))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	l, err := openLedger(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	return run(ctx, l)
}

// parseCap reads --cents of `ledger cap`: a count of cents (0 stops every
// charged prepare), or none, which SetDailyCap takes as a negative value.
func parseCap(v string) (int64, error) {
	switch v {
	case "":
		return 0, usageError("--cents is required: cents per UTC day, or none to remove the cap")
	case "none":
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, usageError("--cents must be a count of cents (0 or more) or none")
	}
	return n, nil
}

func parseTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usageError(flag + " must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
	}
	return t, nil
}

func printBalance(ctx context.Context, l *ledger.Ledger, org string, w io.Writer) error {
	b, err := l.Balance(ctx, org)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "org=%s balance_cents=%d held_cents=%d available_cents=%d\n",
		b.Org, b.BalanceCents, b.HeldCents, b.AvailableCents)
	return err
}

// printRows pages through the org's rows by id, so an export of any size reads each row once.
func printRows(ctx context.Context, l *ledger.Ledger, f ledger.RowFilter, limit int, asCSV bool, w io.Writer) error {
	var cw *ledger.CSVWriter
	var tw *tabwriter.Writer
	if asCSV {
		var err error
		if cw, err = ledger.NewCSVWriter(w, true); err != nil {
			return err
		}
	} else {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCREATED\tMODEL\tAMOUNT\tSTATUS\tREPO\tCOMMIT\tOP\tSUBJECT\tREASON")
	}
	left := limit
	for {
		f.Limit = 1000
		if limit > 0 {
			f.Limit = min(f.Limit, left)
		}
		rows, err := l.QueryRows(ctx, f)
		if err != nil {
			return err
		}
		if cw != nil {
			if err := cw.Write(rows); err != nil {
				return err
			}
		} else {
			for _, r := range rows {
				model := r.Model
				if model == "" {
					model = r.Kind
				}
				status := "-"
				if r.HTTPStatus != 0 {
					status = strconv.Itoa(r.HTTPStatus)
				}
				commit := r.Commit
				if len(commit) > 12 {
					commit = commit[:12]
				}
				// The table is for a terminal: text cells are quoted when they hold anything a
				// terminal would interpret.
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID,
					r.CreatedAt.UTC().Format(time.RFC3339), model, r.AmountCents, status, cell(r.Repo),
					cell(commit), cell(r.Op), cell(r.Subject), cell(r.Reason))
			}
		}
		if len(rows) > 0 {
			f.AfterID = rows[len(rows)-1].ID
		}
		if limit > 0 {
			left -= len(rows)
		}
		if len(rows) < f.Limit || (limit > 0 && left <= 0) {
			break
		}
	}
	if cw != nil {
		return cw.Flush()
	}
	return tw.Flush()
}

// cell shows an empty value as "-" and quotes one with control characters or blanks.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == ' ' || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

// errUnreconciled is returned (exit status 1) when the ledger breaks a rule.
var errUnreconciled = errors.New("the ledger does not reconcile")

func reconcile(ctx context.Context, l *ledger.Ledger, o ledger.ReconcileOptions, w io.Writer) error {
	r, err := l.ReconcileWith(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "accounts=%d rows=%d holds=%d through=%d\n", r.Accounts, r.Rows, r.Holds, r.ThroughID)
	for _, p := range r.Problems {
		fmt.Fprintln(w, "FAIL", p)
	}
	if !r.OK() {
		return fmt.Errorf("%w: %d problem(s)", errUnreconciled, len(r.Problems))
	}
	fmt.Fprintln(w, "ok: every balance equals the sum of its rows, none is below zero, no live or expired hold is orphaned, every prepare row is its hold's (charged as the hold says), no revision is charged twice inside its grace, no usage row names a prepare id without its money row")
	return nil
}
