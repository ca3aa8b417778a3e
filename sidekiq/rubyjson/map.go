package rubyjson

// Map is a JSON object that keeps its keys in insertion order, as a Ruby Hash
// does. Setting an existing key keeps its position; deleting and setting it
// again moves it to the end. The zero Map is not usable; call NewMap.
type Map struct {
	keys  []string
	vals  []Value
	index map[string]int // built lazily for large objects
}

const indexThreshold = 16

// NewMap returns an empty ordered object.
func NewMap() *Map { return &Map{} }

// Len returns the number of keys.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.keys)
}

// Keys returns the keys in order. The slice is shared; do not modify it.
func (m *Map) Keys() []string {
	if m == nil {
		return nil
	}
	return m.keys
}

// At returns the i-th key and value.
func (m *Map) At(i int) (string, Value) { return m.keys[i], m.vals[i] }

func (m *Map) find(k string) int {
	if m == nil {
		return -1
	}
	if m.index != nil {
		if i, ok := m.index[k]; ok {
			return i
		}
		return -1
	}
	for i, key := range m.keys {
		if key == k {
			return i
		}
	}
	if len(m.keys) > indexThreshold {
		m.buildIndex()
	}
	return -1
}

func (m *Map) buildIndex() {
	m.index = make(map[string]int, len(m.keys))
	for i, k := range m.keys {
		m.index[k] = i
	}
}

// Get returns the value of k and whether it is present.
func (m *Map) Get(k string) (Value, bool) {
	i := m.find(k)
	if i < 0 {
		return Value{}, false
	}
	return m.vals[i], true
}

// Has reports whether k is present.
func (m *Map) Has(k string) bool { return m.find(k) >= 0 }

// Set sets k to v, keeping k's position if it exists.
func (m *Map) Set(k string, v Value) {
	if i := m.find(k); i >= 0 {
		m.vals[i] = v
		return
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
	if m.index != nil {
		m.index[k] = len(m.keys) - 1
	}
}

// Delete removes k and reports whether it was present.
func (m *Map) Delete(k string) bool {
	i := m.find(k)
	if i < 0 {
		return false
	}
	m.keys = append(m.keys[:i], m.keys[i+1:]...)
	m.vals = append(m.vals[:i], m.vals[i+1:]...)
	if m.index != nil {
		m.buildIndex()
	}
	return true
}

// Clone returns a deep copy.
func (m *Map) Clone() *Map {
	if m == nil {
		return NewMap()
	}
	out := &Map{keys: make([]string, len(m.keys)), vals: make([]Value, len(m.vals))}
	copy(out.keys, m.keys)
	for i, v := range m.vals {
		out.vals[i] = v.Clone()
	}
	return out
}

// Encode returns the object as Ruby's JSON.generate writes it.
func (m *Map) Encode() []byte { return ObjectValue(m).appendTo(nil) }
