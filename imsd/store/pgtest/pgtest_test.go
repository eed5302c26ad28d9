package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/byoc-dev/byoc/imsd/store/pgtest"
)

func TestStart(t *testing.T) {
	a, b := pgtest.Start(t), pgtest.Start(t)
	if a == b {
		t.Fatalf("two Start calls returned the same database %s", a)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&v); err != nil || v != "off" {
		t.Fatalf("fsync = %q, %v; want off", v, err)
	}
}

func TestMain(m *testing.M) { pgtest.Main(m) }
