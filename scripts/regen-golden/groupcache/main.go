// Where groupcache's consistenthash puts each key: the golden data of testdata/groupcache/.
//
// Built offline against Debian's golang-github-golang-groupcache-dev (GOPATH=/usr/share/gocode,
// GO111MODULE=off). Usage: groupcache-golden KEYS_HEX_FILE < CONFIGS
// Each line of CONFIGS: NAME|REPLICAS|NODE,NODE,...  (nodes are Add()ed in that order, one call
// each). Writes NAME.tsv into the working directory: a header, then HEXKEY<TAB>NODE from Map.Get.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/golang/groupcache/consistenthash"
)

func main() {
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var keys [][]byte
	var hexes []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, err := hex.DecodeString(line)
		if err != nil {
			panic(err)
		}
		keys = append(keys, k)
		hexes = append(hexes, line)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	for in.Scan() {
		line := in.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "|")
		replicas, err := strconv.Atoi(f[1])
		if err != nil {
			panic(err)
		}
		nodes := strings.Split(f[2], ",")
		m := consistenthash.New(replicas, nil)
		for _, n := range nodes {
			m.Add(n)
		}
		out, err := os.Create(f[0] + ".tsv")
		if err != nil {
			panic(err)
		}
		w := bufio.NewWriter(out)
		fmt.Fprintf(w, "# groupcache consistenthash, %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		fmt.Fprintf(w, "# replicas: %d\n", replicas)
		fmt.Fprintf(w, "# nodes: %s\n", strings.Join(nodes, " "))
		for i, k := range keys {
			fmt.Fprintf(w, "%s\t%s\n", hexes[i], m.Get(string(k)))
		}
		w.Flush()
		out.Close()
	}
}
