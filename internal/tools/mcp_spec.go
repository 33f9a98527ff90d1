package tools

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MCPServer names an MCP server and the command that starts it.
type MCPServer struct {
	// Name prefixes the jetloop names of the server's tools.
	Name string
	// Command is the program and its arguments.
	Command []string
}

// validServerName keeps room in a tool name (at most 64 characters) for the
// MCP tool's own name.
var validServerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ParseMCPServer reads the value of toolworker's --mcp flag, NAME=COMMAND.
// NAME is 1 to 32 characters of [A-Za-z0-9_-]. COMMAND is split into words
// the way a POSIX shell splits a simple command line, and nothing more:
// words are separated by blanks; 'single quotes' keep everything literally;
// "double quotes" keep everything but \", \\, \$ and \`, which stand for
// the character after the backslash (so "C:\temp" keeps its backslash);
// outside quotes a backslash keeps the next character; a backslash before a
// line break joins the lines. There is no expansion of variables, globs or
// ~, and no pipes or redirections: for those, run sh -c '…' as the command.
func ParseMCPServer(flag string) (MCPServer, error) {
	name, command, ok := strings.Cut(flag, "=")
	if !ok {
		return MCPServer{}, fmt.Errorf("tools: --mcp %q: want NAME=COMMAND", flag)
	}
	if !validServerName.MatchString(name) {
		return MCPServer{}, fmt.Errorf("tools: --mcp %q: the name must be 1 to 32 characters of [A-Za-z0-9_-]", flag)
	}
	words, err := splitCommand(command)
	if err != nil {
		return MCPServer{}, fmt.Errorf("tools: --mcp %s: %w", name, err)
	}
	if len(words) == 0 {
		return MCPServer{}, fmt.Errorf("tools: --mcp %s: the command is empty", name)
	}
	return MCPServer{Name: name, Command: words}, nil
}

// splitCommand splits a command line into words as ParseMCPServer describes.
// No maintained Go library splits like sh: mattn/go-shellwords and
// buildkite/shellwords drop (or turn into a tab) the backslash of "C:\temp",
// kballard/go-shellquote has had no change since 2018.
func splitCommand(s string) ([]string, error) {
	var (
		words  []string
		word   strings.Builder
		inWord bool
		quote  rune // 0, '\'' or '"'
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && rs[i+1] == '\n':
				i++ // a line continuation
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune("\"\\$`", rs[i+1]):
				i++
				word.WriteRune(rs[i])
			default:
				// Any other backslash is a character like the others.
				word.WriteRune(r)
			}
		case r == '\\':
			if i+1 == len(rs) {
				return nil, errors.New("the command ends with a backslash")
			}
			i++
			if rs[i] != '\n' {
				word.WriteRune(rs[i])
				inWord = true
			}
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// MCPToolName is the jetloop name of an MCP server's tool: the server's
// name, two underscores, the tool's name, with every character outside
// [A-Za-z0-9_-] replaced by '_' (tool names appear in subjects and consumer
// names) and cut to 64 characters. Two tools that end up with one name are
// both left out, with a warning.
func MCPToolName(server, tool string) string {
	var b strings.Builder
	for _, r := range server + "__" + tool {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}
