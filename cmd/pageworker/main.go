// Command pageworker: see internal/cli for its flags and environment.
package main

import "github.com/rangecast/rangecast/internal/cli"

func main() { cli.Main(cli.PageWorker()) }
