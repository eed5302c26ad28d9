package main

import (
	"testing"

	"github.com/byoc-dev/byoc/plugins/sdk"
	"github.com/byoc-dev/byoc/plugins/sdk/sdktest"
)

func TestGreeting(t *testing.T) {
	sdktest.Test(t, greeting{}, sdktest.Case{
		Steps: []sdktest.Step{
			{Op: sdk.OpPlan, Config: map[string]any{"name": "ada"}, Check: sdktest.All(
				sdktest.ExpectChanges("would greet ada"),
				sdktest.ExpectPlannedChange(sdk.ActionCreate, "greeting"),
			)},
			{Config: map[string]any{"name": "ada"}, Check: sdktest.All(
				sdktest.ExpectLog("hello, ada"),
				sdktest.ExpectOutput("greeting", "hello, ada"),
				sdktest.ExpectStateFile("greeting.txt"),
			)},
			// The state directory is kept: the next plan sees what apply did.
			{Op: sdk.OpPlan, Config: map[string]any{"name": "bob"}, Check: sdktest.ExpectPlannedChange(sdk.ActionUpdate, "greeting")},
			{Config: map[string]any{"nam": "ada"}, ExpectDiagnostics: []string{"name: is required", "nam: unknown field"}},
			{Config: map[string]any{"name": " ada"}, ExpectDiagnostics: []string{"name: must not start or end with a space"}},
		},
		// Runs after the final destroy (and after any destroy step).
		CheckDestroy: sdktest.ExpectNoStateFile("greeting.txt"),
	})
}
