"""The engine: what apply, check, status and revert need (the manifest, the series, a checkout and its patch
states, the one way a checkout changes); it imports neither `build` nor `maint`."""
