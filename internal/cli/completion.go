package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// completionCmd prints a shell's completion script for jetloop: the
// commands, and each command's flags, from the commands themselves.
func completionCmd(_ context.Context, c *command, args []string) int {
	if !c.parse(args) {
		return c.exit
	}
	if c.flags.NArg() != 1 {
		return c.usageErr("usage: jetloop completion bash|zsh|fish")
	}
	switch c.flags.Arg(0) {
	case "bash":
		writeBash(c.stdout)
	case "zsh":
		// zsh runs bash's completion functions through bashcompinit.
		fmt.Fprint(c.stdout, "#compdef jetloop\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBash(c.stdout)
	case "fish":
		writeFish(c.stdout)
	default:
		return c.usageErr("no completion for %q: bash, zsh or fish", c.flags.Arg(0))
	}
	return ExitOK
}

// flagsOf returns the flags command s defines, its own first, then the
// ones every command takes: each command defines its flags as it runs, so
// it is run with --help, quietly.
func flagsOf(s spec) (own, global []string) {
	c := &command{name: s.name, spec: s, stdout: io.Discard, stderr: io.Discard}
	c.flags = flag.NewFlagSet("jetloop "+s.name, flag.ContinueOnError)
	c.flags.SetOutput(io.Discard)
	c.globalFlags(c.flags)
	c.global = map[string]bool{}
	c.flags.VisitAll(func(f *flag.Flag) { c.global[f.Name] = true })
	c.flags.Usage = func() {}
	if s.name != "help" && s.name != "completion" {
		s.run(context.Background(), c, []string{"--help"})
	}
	c.flags.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "internal:") {
			return // plumbing, not for people
		}
		if c.global[f.Name] {
			global = append(global, "--"+f.Name)
		} else {
			own = append(own, "--"+f.Name)
		}
	})
	return own, global
}

// words are the words that may follow a command, besides flags: its
// subcommands and, for help, the commands.
func words(s spec) []string {
	if s.name == "help" {
		var names []string
		for _, o := range specs {
			names = append(names, o.name)
		}
		return names
	}
	if s.name == "completion" {
		return []string{"bash", "zsh", "fish"}
	}
	var out []string
	for _, syn := range s.synopses {
		first := strings.Fields(syn)
		if len(first) == 0 {
			continue
		}
		for w := range strings.SplitSeq(first[0], "|") {
			if w != "" && w == strings.ToLower(w) && !strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "[") && !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	return out
}

func writeBash(w io.Writer) {
	var names []string
	for _, s := range specs {
		names = append(names, s.name)
	}
	_, global := flagsOf(specs[0])
	fmt.Fprintf(w, `# jetloop completion for bash: source <(jetloop completion bash)
_jetloop() {
	local cur=${COMP_WORDS[COMP_CWORD]} cmd="" i
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		-*) ;;
		*) case ${COMP_WORDS[i-1]} in %s) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac ;;
		esac
	done
	local words
	case $cmd in
	"") words="%s %s" ;;
`, strings.Join(valueFlagPatterns(global), "|"), strings.Join(names, " "), strings.Join(global, " "))
	for _, s := range specs {
		own, global := flagsOf(s)
		fmt.Fprintf(w, "\t%s) words=%q ;;\n", s.name, strings.Join(slices.Concat(words(s), own, global), " "))
	}
	fmt.Fprint(w, `	esac
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _jetloop jetloop
`)
}

// valueFlagPatterns are the flags every command takes that take a value,
// as bash case patterns: the word after one is its value, not a command.
func valueFlagPatterns(global []string) []string {
	f := flag.NewFlagSet("jetloop", flag.ContinueOnError)
	(&command{}).globalFlags(f)
	var out []string
	for _, g := range global {
		fl := f.Lookup(strings.TrimPrefix(g, "--"))
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		out = append(out, g, "-"+strings.TrimPrefix(g, "--"))
	}
	return out
}

func writeFish(w io.Writer) {
	fmt.Fprint(w, "# jetloop completion for fish: jetloop completion fish | source\ncomplete -c jetloop -f\n")
	_, global := flagsOf(specs[0])
	for _, g := range global {
		fmt.Fprintf(w, "complete -c jetloop -l %s\n", strings.TrimPrefix(g, "--"))
	}
	for _, s := range specs {
		fmt.Fprintf(w, "complete -c jetloop -n __fish_use_subcommand -a %s -d %s\n", s.name, fishQuote(s.summary))
		own, _ := flagsOf(s)
		for _, o := range own {
			fmt.Fprintf(w, "complete -c jetloop -n '__fish_seen_subcommand_from %s' -l %s\n", s.name, strings.TrimPrefix(o, "--"))
		}
		if ws := words(s); len(ws) > 0 {
			fmt.Fprintf(w, "complete -c jetloop -n '__fish_seen_subcommand_from %s' -a %s\n", s.name, fishQuote(strings.Join(ws, " ")))
		}
	}
}

func fishQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
