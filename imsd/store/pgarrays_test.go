package store

import (
	"context"
	"database/sql"
	"math"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

// TestPGArraysRoundTrip sends pgTexts and pgInt8s to a real PostgreSQL
// next to the same plain slices (which pgx sends as FlatArrays) and
// checks that PostgreSQL receives equal arrays, element by element, in
// order, and that they read back as sent, NULL for nil.
func TestPGArraysRoundTrip(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	texts := [][]string{
		nil,
		{},
		{""},
		{"", "", ""},
		{"a", `it's "quoted"`, `back\slash`, `\\`, "com,ma", "{braces}", "}{", "NULL", "null", " spaced ", "tab\tnew\nline"},
		{"unicode: ü, 日本語, 🙂", "\u00a0", "\u200b", "ends with \\"},
	}
	for _, x := range texts {
		var same sql.NullBool
		var n sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT $1::TEXT[] IS NOT DISTINCT FROM $2::TEXT[], cardinality($1::TEXT[])`, pgTexts(x), x).Scan(&same, &n); err != nil {
			t.Fatalf("%q: %v", x, err)
		}
		if !same.Valid || !same.Bool {
			t.Errorf("%q: PostgreSQL got a different array than from a []string", x)
		}
		if x == nil {
			if n.Valid {
				t.Errorf("nil: want NULL, got cardinality %d", n.Int64)
			}
			continue
		}
		if !n.Valid || n.Int64 != int64(len(x)) {
			t.Errorf("%q: cardinality %v, want %d", x, n, len(x))
		}
		rows, err := db.QueryContext(ctx, `SELECT v FROM unnest($1::TEXT[]) WITH ORDINALITY AS u(v, i) ORDER BY i`, pgTexts(x))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if !slices.Equal(got, x) {
			t.Errorf("read back %q, sent %q", got, x)
		}
	}
	ints := [][]int64{nil, {}, {0}, {1, -1, 255, 256, math.MaxInt64, math.MinInt64, 1764288000123456789}}
	for _, x := range ints {
		var same sql.NullBool
		if err := db.QueryRowContext(ctx, `SELECT $1::BIGINT[] IS NOT DISTINCT FROM $2::BIGINT[]`, pgInt8s(x), x).Scan(&same); err != nil {
			t.Fatalf("%v: %v", x, err)
		}
		if !same.Valid || !same.Bool {
			t.Errorf("%v: PostgreSQL got a different array than from a []int64", x)
		}
		var s sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT array_to_string($1::BIGINT[], ',')`, pgInt8s(x)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		var want sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT array_to_string($1::BIGINT[], ',')`, x).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if s != want {
			t.Errorf("%v: read back %v, want %v", x, s, want)
		}
	}
}

// TestPGArraysDoNotAllocatePerElement checks that encoding a pgTexts or
// pgInt8s allocates as much for 200 elements as for 1 (a plain []string
// or []int64 allocates once per element).
func TestPGArraysDoNotAllocatePerElement(t *testing.T) {
	m := pgtype.NewMap()
	var buf []byte
	allocs := func(oid uint32, v any) float64 {
		return testing.AllocsPerRun(100, func() {
			var err error
			if buf, err = m.Encode(oid, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
				t.Fatal(err)
			}
		})
	}
	long, longInts := make([]string, 200), make([]int64, 200)
	for i := range long {
		long[i], longInts[i] = "element", int64(1e18+i)
	}
	if one, many := allocs(pgtype.TextArrayOID, pgTexts{"element"}), allocs(pgtype.TextArrayOID, pgTexts(long)); many > one {
		t.Errorf("pgTexts: %v allocations for 200 elements, %v for 1", many, one)
	}
	if one, many := allocs(pgtype.Int8ArrayOID, pgInt8s{1e18}), allocs(pgtype.Int8ArrayOID, pgInt8s(longInts)); many > one {
		t.Errorf("pgInt8s: %v allocations for 200 elements, %v for 1", many, one)
	}
}
