package store

// The batched ack's and finish's statements, for TestPostgresJobPlans.
const PGAckSQL, PGFinishSQL = pgAckSQL, pgFinishSQL
