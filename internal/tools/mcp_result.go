package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpResult turns an MCP tool result into a jetloop result: text blocks as
// they are, every other kind of content as a one-line summary (a result is
// text), and structured content as JSON text unless the text already says
// it. The MCP spec asks servers to repeat structured content as text, some
// as the same JSON, some in their own words (server-filesystem returns a
// file's text and {"content": text}); sending both would double the tokens.
func mcpResult(res *mcp.CallToolResult) Result {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, contentText(c))
	}
	text := strings.Join(parts, "\n")
	if res.StructuredContent != nil {
		data, err := json.Marshal(res.StructuredContent)
		switch {
		case err != nil:
			parts = append(parts, fmt.Sprintf("[structured content that is not JSON: %v]", err))
		case !saidIn(text, data):
			parts = append(parts, string(data))
		}
	}
	return Result{Output: strings.Join(parts, "\n"), IsError: res.IsError}
}

func contentText(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.ImageContent:
		return fmt.Sprintf("[image: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data))
	case *mcp.AudioContent:
		return fmt.Sprintf("[audio: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data))
	case *mcp.ResourceLink:
		return fmt.Sprintf("[resource link: %s %s]", c.Name, c.URI)
	case *mcp.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[resource]"
		}
		if r.Blob != nil {
			return fmt.Sprintf("[resource: %s, %s, %d bytes]", r.URI, orUnknown(r.MIMEType), len(r.Blob))
		}
		return fmt.Sprintf("[resource: %s]\n%s", r.URI, r.Text)
	default:
		return fmt.Sprintf("[content: %T]", c)
	}
}

func orUnknown(mime string) string {
	if mime == "" {
		return "unknown type"
	}
	return mime
}

// saidIn reports whether text already holds the JSON value data: as a
// whole, or every string, number and boolean in it verbatim.
func saidIn(text string, data []byte) bool {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	var whole any
	if json.Unmarshal([]byte(text), &whole) == nil && reflect.DeepEqual(whole, v) {
		return true
	}
	var leaves func(v any) bool
	leaves = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				if !leaves(e) {
					return false
				}
			}
		case []any:
			for _, e := range v {
				if !leaves(e) {
					return false
				}
			}
		case string:
			return strings.Contains(text, v)
		case float64:
			return strings.Contains(text, strconv.FormatFloat(v, 'f', -1, 64))
		case bool:
			return strings.Contains(text, strconv.FormatBool(v))
		}
		return true
	}
	return text != "" && leaves(v)
}
