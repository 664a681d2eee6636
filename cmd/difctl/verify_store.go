package main

import (
	"context"
	"errors"
	"io"
)

// runVerifyStore verifies a store-backed image against its stored tuples.
func runVerifyStore(ctx context.Context, opts verifyOptions, stdout, stderr io.Writer) error {
	return errors.New("verify against a store: not available in this build; use --interleaved or --dix")
}

// runConvertStore converts to or from a store-backed image.
func runConvertStore(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	return errors.New("convert to or from a store: not available in this build")
}

func runRemapStore(ctx context.Context, opts remapOptions, stdout, stderr io.Writer) error {
	return errors.New("remap of a store-backed image: not available in this build; use --interleaved or --dix")
}

func runInjectStore(ctx context.Context, opts injectOptions, stdout, stderr io.Writer) error {
	return errors.New("inject into a store-backed image: not available in this build; use --interleaved or --dix")
}

func runInspectStore(ctx context.Context, opts inspectOptions, stdout, stderr io.Writer) error {
	return errors.New("inspect of a store-backed image: not available in this build; use --interleaved or --dix")
}
