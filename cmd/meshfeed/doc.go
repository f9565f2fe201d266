// Command meshfeed is the meshfeed binary: gen writes a synthetic dataset,
// inspect prints files, schemas and row groups, plan prints the epoch plan for a
// mesh, and later serve runs the Flight server.
//
// Usage:
//
//	meshfeed <command> [flags]
//
// Run `meshfeed <command> -h` for a command's flags.
package main
