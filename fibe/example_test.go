package fibe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/fibe-dev/billing/fibe"
)

// Create a playground so that a retry can never create a second one: the
// key is chosen once, before the first attempt, and stored with your own
// record (here a variable), so even a crash-and-rerun of this code reuses it.
func Example_createPlaygroundSafely() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	key := fibe.NewIdempotencyKey() // persist this with your job before calling
	ctx := fibe.WithIdempotencyKey(context.Background(), key)
	accepted, err := client.Playgrounds.Create(ctx, "42", fibe.PlaygroundParams{Name: "demo"})
	if err != nil {
		log.Fatal(err)
	}
	// Running the same call again with the same key answers the same request.
	again, err := client.Playgrounds.Create(ctx, "42", fibe.PlaygroundParams{Name: "demo"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("playground", accepted.PlaygroundID, "request", accepted.RequestID)
	fmt.Println("same playground:", again.PlaygroundID == accepted.PlaygroundID, "replayed:", again.LastResponse.IdempotentReplayed)
	// Output:
	// playground 7 request 1
	// same playground: true replayed: true
}

// Convert Mana into Sparks, telling a low balance apart from other errors.
func ExampleConversionsService_Create() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	conv, err := client.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 100})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sparks now", conv.SparksCredit.BalanceAfter)

	_, err = client.Conversions.Create(context.Background(), fibe.ConversionParams{Mana: 1_000_000})
	var apiErr *fibe.APIError
	if errors.As(err, &apiErr) && apiErr.Code == "insufficient_balance" {
		fmt.Println("not enough Mana:", apiErr.StatusCode)
	}
	// Output:
	// sparks now 100
	// not enough Mana: 409
}

// Wait for an asynchronous request (fund, playground create, restart, sync)
// to finish. Wait polls until a terminal status or until ctx is done.
func ExampleRequestsService_Wait() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	accepted, err := client.Playgrounds.Restart(context.Background(), "7")
	if err != nil {
		log.Fatal(err)
	}
	req, err := client.Requests.Wait(context.Background(), accepted.RequestID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(req.Status, string(req.Result))
	// Output: succeeded {"playground_id":"7"}
}

// A Marquee that is not funded refuses work with 402 marquee_not_funded.
func ExampleAPIError() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	_, err := client.Playgrounds.Create(context.Background(), "13", fibe.PlaygroundParams{})
	if fibe.IsCode(err, "marquee_not_funded") {
		fmt.Println("fund Marquee 13 first")
	}
	// Output: fund Marquee 13 first
}

// Start a purchase: the order comes back pending with the provider's hosted
// checkout, where the customer pays. Fulfilment follows the provider's
// webhook; poll the order (or your own records) for it.
func ExampleCheckoutsService_Create() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	order, err := client.Checkouts.Create(context.Background(), fibe.CheckoutParams{SKU: "mana_1000", Provider: "stripe"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order", order.ID, order.Status, order.Amount, order.Currency)
	fmt.Println("send the customer to", order.CheckoutURL)
	// Output:
	// order 9 pending 999 usd
	// send the customer to https://checkout.stripe.com/c/pay/cs_test_9
}

// Read what went back on an order: a refund or a dispute after payment
// moves its status and says how much was refunded (in the currency's minor
// units) and how much Mana was taken back for it.
func ExampleOrdersService_Get() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	order, err := client.Orders.Get(context.Background(), "9")
	if err != nil {
		log.Fatal(err)
	}
	if order.Status == fibe.OrderPartiallyRefunded || order.Status == fibe.OrderRefunded {
		fmt.Printf("refunded %d of %d %s, %d of %d Mana clawed back\n",
			order.RefundedAmount, order.Amount, order.Currency, order.ClawedBackMana, order.Mana)
	}
	// Output: refunded 333 of 999 usd, 334 of 1000 Mana clawed back
}

// Answer "was I charged twice?": the order lists every payment received
// for it. A second payment minted nothing and shows unapplied until it is
// refunded; each payment lists its refunds and disputes.
func ExampleOrder_Unapplied() {
	srv := startFakeAPI()
	defer srv.Close()
	client := fibe.NewClient(srv.URL, "bk_your_api_key")

	order, err := client.Orders.Get(context.Background(), "10")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(order.Payments), "payments,", len(order.Unapplied()), "to be refunded")
	for _, p := range order.Payments {
		fmt.Println(p.PaymentID, p.Status, p.Amount, p.Currency, "refunded", p.RefundedAmount)
		for _, r := range p.Reversals {
			fmt.Println("  ", r.Kind, r.ID, r.State, r.Amount)
		}
	}
	// Output:
	// 2 payments, 1 to be refunded
	// cs_test_10 partially_refunded 999 usd refunded 333
	//    refund charge:ch_10 succeeded 333
	//    dispute dp_10 open 100
	// cs_test_again_10 unapplied 999 usd refunded 0
}

// startFakeAPI serves just enough of the API for the examples, including the
// replay of a repeated Idempotency-Key.
func startFakeAPI() *httptest.Server {
	var mu sync.Mutex
	seen := map[string]string{}
	reply := func(w http.ResponseWriter, status int, body string) {
		if strings.Contains(body, `"code"`) {
			w.Header().Set("Content-Type", "application/problem+json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			mu.Lock()
			stored, ok := seen[key]
			mu.Unlock()
			if ok {
				w.Header().Set("X-Idempotent-Replayed", "true")
				reply(w, http.StatusAccepted, stored)
				return
			}
		}
		switch {
		case r.URL.Path == "/v1/marquees/42/playgrounds":
			resp := `{"request_id":"1","playground_id":"7"}`
			mu.Lock()
			seen[r.Header.Get("Idempotency-Key")] = resp
			mu.Unlock()
			reply(w, http.StatusAccepted, resp)
		case r.URL.Path == "/v1/marquees/13/playgrounds":
			reply(w, http.StatusPaymentRequired, `{"status":402,"code":"marquee_not_funded","detail":"Marquee 13 is not funded"}`)
		case r.URL.Path == "/v1/playgrounds/7/restart":
			reply(w, http.StatusAccepted, `{"request_id":"2","playground_id":"7"}`)
		case r.URL.Path == "/v1/requests/2":
			reply(w, http.StatusOK, `{"id":"2","status":"succeeded","result":{"playground_id":"7"}}`)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/checkouts":
			reply(w, http.StatusCreated, `{"id":"9","sku":"mana_1000","provider":"stripe","amount":999,"currency":"usd",`+
				`"mana":1000,"status":"pending","created_at":"2026-01-02T03:04:05Z","refunded_amount":0,"clawed_back_mana":0,`+
				`"checkout_url":"https://checkout.stripe.com/c/pay/cs_test_9"}`)
		case r.URL.Path == "/v1/orders/9":
			reply(w, http.StatusOK, `{"id":"9","sku":"mana_1000","provider":"stripe","amount":999,"currency":"usd",`+
				`"mana":1000,"status":"partially_refunded","created_at":"2026-01-02T03:04:05Z",`+
				`"fulfilled_at":"2026-01-02T03:05:00Z","refunded_amount":333,"clawed_back_mana":334}`)
		case r.URL.Path == "/v1/orders/10":
			reply(w, http.StatusOK, `{"id":"10","sku":"mana_1000","provider":"stripe","amount":999,"currency":"usd",`+
				`"mana":1000,"status":"disputed","created_at":"2026-01-02T03:04:05Z","fulfilled_at":"2026-01-02T03:05:00Z",`+
				`"refunded_amount":333,"clawed_back_mana":434,"payments":[`+
				`{"provider":"stripe","payment_id":"cs_test_10","amount":999,"currency":"usd","status":"partially_refunded",`+
				`"refunded_amount":333,"mana":1000,"created_at":"2026-01-02T03:05:00Z","reversals":[`+
				`{"id":"charge:ch_10","kind":"refund","state":"succeeded","amount":333,"currency":"usd",`+
				`"created_at":"2026-01-03T10:00:00Z","updated_at":"2026-01-03T10:00:00Z"},`+
				`{"id":"dp_10","kind":"dispute","state":"open","amount":100,"currency":"usd",`+
				`"created_at":"2026-01-04T10:00:00Z","updated_at":"2026-01-04T10:00:00Z"}]},`+
				`{"provider":"stripe","payment_id":"cs_test_again_10","amount":999,"currency":"usd","status":"unapplied",`+
				`"refunded_amount":0,"mana":0,"created_at":"2026-01-02T03:06:00Z","reversals":[]}]}`)
		case r.URL.Path == "/v1/conversions" && strings.Contains(string(body), `"mana":100}`):
			reply(w, http.StatusCreated, `{"mana_debit":{"id":"1","amount":-100,"balance_after":0},"sparks_credit":{"id":"2","amount":100,"balance_after":100}}`)
		case r.URL.Path == "/v1/conversions":
			reply(w, http.StatusConflict, `{"status":409,"code":"insufficient_balance","detail":"not enough mana"}`)
		default:
			reply(w, http.StatusNotFound, `{"status":404,"code":"not_found"}`)
		}
	}))
}
