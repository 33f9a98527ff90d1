package lru

import "testing"

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	c := New[string, int](2)
	c.Put("a", 1)
	c.Put("b", 2)
	if v, ok := c.Get("a"); !ok || v != 1 { // a is now the one used last
		t.Fatalf("Get(a) = %d, %v", v, ok)
	}
	c.Put("c", 3)
	if c.Contains("b") {
		t.Fatal("b, the least recently used, is still cached")
	}
	for k, want := range map[string]int{"a": 1, "c": 3} {
		if v, ok := c.Get(k); !ok || v != want {
			t.Fatalf("Get(%s) = %d, %v; want %d", k, v, ok, want)
		}
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
}

func TestPutReplacesAndContainsDoesNotPromote(t *testing.T) {
	c := New[string, int](2)
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("a", 10) // a used last, b oldest
	if !c.Contains("b") {
		t.Fatal("b evicted by a replacement")
	}
	c.Contains("b") // must not save b
	c.Put("c", 3)
	if c.Contains("b") {
		t.Fatal("Contains marked b used")
	}
	if v, _ := c.Get("a"); v != 10 {
		t.Fatalf("Get(a) = %d, want 10", v)
	}
	c.Delete("a")
	c.Delete("nosuch")
	if c.Contains("a") || c.Len() != 1 {
		t.Fatalf("after Delete: contains a %v, len %d", c.Contains("a"), c.Len())
	}
}

func TestSizeAtLeastOne(t *testing.T) {
	c := New[int, int](0)
	c.Put(1, 1)
	c.Put(2, 2)
	if c.Len() != 1 || !c.Contains(2) {
		t.Fatalf("len %d, contains 2: %v", c.Len(), c.Contains(2))
	}
}
