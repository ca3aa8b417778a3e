// Command version prints buildinfo.Version(): the buildinfo tests build it
// as make release builds gojob, without linking all of gojob.
package main

import (
	"fmt"

	"github.com/gojob/gojob/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Version()) }
