package tools

// sameName compares directory names as Linux file systems do: by bytes.
func sameName(a, b string) bool { return a == b }
