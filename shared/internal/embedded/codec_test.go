package embedded

import (
	"reflect"
	"strings"
	"testing"
)

// TestRecordFieldNamesAreDistinct: no two fields of a stored record share
// a JSON name. encoding/json drops both fields of a clash without a word,
// so a clash (two features built apart once both chose "rk") would lose
// both values from every row written.
func TestRecordFieldNamesAreDistinct(t *testing.T) {
	for _, v := range []any{rowRec{}, parentRec{}, childrenRec{}, awaitRec{}} {
		typ := reflect.TypeOf(v)
		seen := map[string]string{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if other, dup := seen[name]; dup {
				t.Errorf("%s: fields %s and %s are both %q", typ.Name(), other, f.Name, name)
			}
			seen[name] = f.Name
		}
	}
}
