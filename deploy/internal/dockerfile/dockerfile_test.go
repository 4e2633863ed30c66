package dockerfile

import (
	"reflect"
	"strings"
	"testing"
)

const sample = `# syntax=docker/dockerfile:1
ARG BASE=golang:1.26.8@sha256:` + hex64 + `
ARG EMPTY

FROM ${BASE} AS build
ARG V=v1
ENV A=1 B="two words" \
    C=3
RUN echo one \
 # a comment inside a continued instruction
 && echo two

FROM --platform=linux/amd64 debian:12
ARG BASE
ENV LEGACY some value
USER 65532:65532
`

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParse(t *testing.T) {
	f, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.GlobalArgs, map[string]string{"BASE": "golang:1.26.8@sha256:" + hex64, "EMPTY": ""}; !reflect.DeepEqual(got, want) {
		t.Errorf("global args = %v, want %v", got, want)
	}
	if len(f.Stages) != 2 {
		t.Fatalf("stages = %d, want 2", len(f.Stages))
	}
	build := f.StageNamed("build")
	if build == nil || build.From != "golang:1.26.8@sha256:"+hex64 {
		t.Fatalf("build stage = %+v", build)
	}
	if got := build.Args(f.GlobalArgs); !reflect.DeepEqual(got, map[string]string{"V": "v1"}) {
		t.Errorf("build args = %v", got)
	}
	env, err := ParseEnv(build.Each("ENV")[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]string{{"A", "1"}, {"B", "two words"}, {"C", "3"}}; !reflect.DeepEqual(env, want) {
		t.Errorf("env = %v, want %v", env, want)
	}
	run := build.Each("RUN")[0]
	if strings.Contains(run.Args, "comment") || !strings.Contains(run.Args, "echo two") || run.Line != 9 {
		t.Errorf("run = %+v", run)
	}
	final := f.Final()
	if final.From != "debian:12" || final.User() != "65532:65532" {
		t.Errorf("final = %+v", final)
	}
	if got := final.Args(f.GlobalArgs)["BASE"]; got != "golang:1.26.8@sha256:"+hex64 {
		t.Errorf("redeclared global ARG = %q", got)
	}
	legacy, _ := ParseEnv(final.Each("ENV")[0].Args)
	if want := [][2]string{{"LEGACY", "some value"}}; !reflect.DeepEqual(legacy, want) {
		t.Errorf("legacy env = %v", legacy)
	}
}

func TestParseRefusals(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no from", "ARG A=1\n", "no FROM"},
		{"run before from", "RUN true\nFROM x\n", "before the first FROM"},
		{"arg without default in from", "ARG IMG\nFROM ${IMG}\n", "no default for IMG"},
		{"unknown arg in from", "FROM ${NOPE}\n", "no default for NOPE"},
		{"open continuation", "FROM x\nRUN a \\\n", "ends inside"},
		{"bad from", "FROM a b c d\n", "want IMAGE"},
		{"not an instruction", "FROM x\n!!\n", "not an instruction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ref
		err  bool
	}{
		{in: "debian", want: Ref{Name: "debian"}},
		{in: "node:22.22.2-bookworm-slim@sha256:" + hex64, want: Ref{Name: "node", Tag: "22.22.2-bookworm-slim", Digest: "sha256:" + hex64}},
		{in: "registry:5000/a/b:1", want: Ref{Name: "registry:5000/a/b", Tag: "1"}},
		{in: "registry:5000/a/b", want: Ref{Name: "registry:5000/a/b"}},
		{in: "gcr.io/x@sha256:" + hex64, want: Ref{Name: "gcr.io/x", Digest: "sha256:" + hex64}},
		{in: "x@sha256:abc", err: true},
		{in: "x@md5:" + hex64, err: true},
		{in: ":tag", err: true},
	} {
		got, err := ParseRef(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v, err %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("FROM a\nRUN \\\n")
	f.Add("ARG X=${Y}\nFROM $X AS y\nENV a=\"b\n")
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse(src)
		if err != nil {
			return
		}
		if len(file.Stages) == 0 {
			t.Fatal("parsed without a stage")
		}
		for _, st := range file.Stages {
			_ = st.Args(file.GlobalArgs)
			_ = st.User()
			for _, in := range st.Each("ENV") {
				_, _ = ParseEnv(in.Args)
			}
			_, _ = ParseRef(st.From)
		}
	})
}
