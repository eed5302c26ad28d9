package store

import "github.com/jackc/pgx/v5/pgtype"

// pgTexts and pgInt8s pass a []string or []int64 to pgx as a TEXT[] or
// BIGINT[] parameter of the PostgreSQL group commit's unnest(...)
// statements. pgx takes a plain slice as a pgtype.FlatArray, whose Index
// returns each element as an any: a string or an int64 (past 255) boxed
// on the heap, tens per job on the batch path. These return a pointer
// to the element instead (no allocation), of a type pgx's text and int8
// codecs encode through their valuer interfaces; the bytes sent are the
// same. A nil slice is NULL, as with a plain slice.
type (
	pgTexts []string
	pgInt8s []int64

	pgTextElem string
	pgInt8Elem int64
)

func (a pgTexts) Dimensions() []pgtype.ArrayDimension { return flatDims(a == nil, len(a)) }
func (a pgTexts) Index(i int) any                     { return (*pgTextElem)(&a[i]) }
func (a pgTexts) IndexType() any                      { return (*pgTextElem)(nil) }

func (e *pgTextElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

func (a pgInt8s) Dimensions() []pgtype.ArrayDimension { return flatDims(a == nil, len(a)) }
func (a pgInt8s) Index(i int) any                     { return (*pgInt8Elem)(&a[i]) }
func (a pgInt8s) IndexType() any                      { return (*pgInt8Elem)(nil) }

func (e *pgInt8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// flatDims is pgtype.FlatArray's Dimensions.
func flatDims(null bool, n int) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}
