// Command meshfeed is the meshfeed binary, the one place where the packages
// are wired together: gen writes a synthetic dataset, inspect prints files,
// schemas and row groups, plan prints the epoch plan for a mesh, read measures
// raw decoding, serve runs the server (feed's Pipeline behind transport's
// Flight server, and its shared-memory wire with --shm), gen-text writes a
// text dataset and tokenize prints a text column's token ids per a
// tokenizer.json.
//
// Usage:
//
//	meshfeed <command> [flags]
//
// Run `meshfeed <command> -h` for a command's flags.
package main
