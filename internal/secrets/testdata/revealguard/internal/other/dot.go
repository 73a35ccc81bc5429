package other

import . "github.com/airlock-sandbox/airlock/internal/secrets"

// A dot import hides what is used: reported.
var _ = ValidateName
