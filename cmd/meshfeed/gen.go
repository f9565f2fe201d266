package main

import (
	"context"
	"errors"
)

func runGen(ctx context.Context, args []string) error {
	return errors.New("not implemented yet")
}
