package tools

// MCPPid is the process id of a running MCP server, 0 while it is down: the
// tests kill servers by it.
func MCPPid(m *MCP, server string) int {
	for _, s := range m.servers {
		if s.spec.Name != server {
			continue
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.session == nil {
			return 0
		}
		return s.cmd.Process.Pid
	}
	return 0
}

// MCPResult exposes the conversion of MCP results to the tests.
var MCPResult = mcpResult
