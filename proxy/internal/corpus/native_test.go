package corpus

import (
	"reflect"
	"testing"
)

// What GNU make -n -w prints for jq after configure: libtool-wrapped and
// plain compiler lines, in the directories make enters.
func TestDryRunEntries(t *testing.T) {
	out := `make  all-recursive
make[1]: Entering directory '/w/jq'
depbase=` + "`echo src/builtin.lo | sed 's|[^/]*$|.deps/&|;s|\\.lo$||'`" + `;\
/bin/bash ./libtool --silent --tag=CC   --mode=compile gcc -DPACKAGE_STRING=\"jq\ \" -DHAVE_X=1 -I. -I./src -g -O2 -MT src/builtin.lo -MD -MP -MF $depbase.Tpo -c -o src/builtin.lo src/builtin.c &&\
mv -f $depbase.Tpo $depbase.Plo
make[2]: Entering directory '/w/jq/vendor/lib'
gcc -DY -I. -c -o a.o a.c
make[2]: Leaving directory '/w/jq/vendor/lib'
gcc -I./src -c src/main.c
echo not a compiler -c x.c
make[1]: Leaving directory '/w/jq'
`
	got := dryRunEntries(out, "/w/jq")
	want := []cdbEntry{
		{Directory: "/w/jq", File: "/w/jq/src/builtin.c", Arguments: []string{"gcc", `-DPACKAGE_STRING="jq "`, "-DHAVE_X=1", "-I.", "-I./src", "-g", "-O2", "-MT", "src/builtin.lo", "-MD", "-MP", "-MF", "$depbase.Tpo", "-c", "-o", "src/builtin.lo", "src/builtin.c"}},
		{Directory: "/w/jq/vendor/lib", File: "/w/jq/vendor/lib/a.c", Arguments: []string{"gcc", "-DY", "-I.", "-c", "-o", "a.o", "a.c"}},
		{Directory: "/w/jq", File: "/w/jq/src/main.c", Arguments: []string{"gcc", "-I./src", "-c", "src/main.c"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries:\n got %q\nwant %q", got, want)
	}
}
