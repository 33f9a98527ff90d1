package cli

import "testing"

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{"TurnID": "turn_id", "LastTime": "last_time", "Step": "step", "HTTPServer": "http_server", "Used2": "used2"} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%s) = %s, want %s", in, got, want)
		}
	}
}
