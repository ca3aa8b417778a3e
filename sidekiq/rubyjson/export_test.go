package rubyjson

// ParseObjectShared is parseObjectShared, for the external tests.
var ParseObjectShared = parseObjectShared
