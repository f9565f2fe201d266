package main

import (
	"context"
	"errors"
)

func runPlan(ctx context.Context, args []string) error {
	return errors.New("not implemented yet")
}
