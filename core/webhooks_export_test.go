package core

// DeliveriesPerAccount is the cap of attempts in flight to one account.
const DeliveriesPerAccount = deliveriesPerAccount
