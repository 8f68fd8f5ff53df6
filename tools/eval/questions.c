/*
 * questions.c -- the embedded question set of ds4-eval: short questions
 * with one unambiguous, mechanically checkable answer (written for ds4;
 * arithmetic and algebra, code output prediction, logic puzzles, multiple
 * choice on facts, tool calls).  Answers were worked out by hand; the
 * graders are in grade.c.  Ids are stable: reports and --ids refer to them.
 */
#include "grade.h"

#define N EV_NUMBER
#define C EV_CHOICE
#define R EV_REGEX
#define T EV_TOOL
#define PY "What does this Python program print?\n\n"
#define CC "What does this C program print?\n\n"
#define JS "What does this JavaScript program print?\n\n"

const ev_question ev_questions[] = {
    /* arithmetic and algebra */
    { "a01", "arithmetic", N, "What is 17 * 23?", "391", NULL },
    { "a02", "arithmetic", N, "What is 1234 + 5678?", "6912", NULL },
    { "a03", "arithmetic", N, "What is 144 / 12 + 7 * 3?", "33", NULL },
    { "a04", "algebra", N, "Solve for x: 3x + 7 = 34.", "9", NULL },
    { "a05", "arithmetic", N, "What is 2 to the power of 10?", "1024", NULL },
    { "a06", "arithmetic", N, "What is the sum of the integers from 1 to 100?", "5050", NULL },
    { "a07", "algebra", N, "Solve for x: 5x - 3 = 2x + 12.", "5", NULL },
    { "a08", "arithmetic", N, "What is 15% of 240?", "36", NULL },
    { "a09", "algebra", N, "If f(x) = x^2 - 4x + 1, what is f(5)?", "6", NULL },
    { "a10", "arithmetic", N, "What is the greatest common divisor of 84 and 126?", "42", NULL },
    { "a11", "arithmetic", N, "What is the least common multiple of 12 and 18?", "36", NULL },
    { "a12", "arithmetic", N, "A rectangle has sides of length 7 and 12. What is its area?", "84", NULL },
    { "a13", "arithmetic", N, "What is 1000 - 387?", "613", NULL },
    { "a14", "algebra", N, "What is the positive solution of x^2 - 5x - 14 = 0?", "7", NULL },
    { "a15", "arithmetic", N, "What is 7 factorial (7!)?", "5040", NULL },
    { "a16", "arithmetic", N, "What is 0.25 * 0.4?", "0.1", NULL },
    { "a17", "arithmetic", N, "A train travels 180 km in 2.5 hours. What is its average speed in km/h?", "72", NULL },
    { "a18", "arithmetic", N, "What is the remainder when 1000 is divided by 7?", "6", NULL },
    { "a19", "algebra", N, "If 2^x = 64, what is x?", "6", NULL },
    { "a20", "arithmetic", N, "What is the sum of the interior angles of a hexagon, in degrees?", "720", NULL },
    { "a21", "algebra", N, "Solve the system x + y = 10, x - y = 4. What is x * y?", "21", NULL },
    { "a22", "arithmetic", N, "What is -8 + 3 * (-2)?", "-14", NULL },

    /* code output prediction */
    { "c01", "code", N, PY "print(sum(range(10)))", "45", NULL },
    { "c02", "code", N, PY "x = [1, 2, 3]\ny = x\ny.append(4)\nprint(len(x))", "4", NULL },
    { "c03", "code", N, PY "print(len(\"hello world\"))", "11", NULL },
    { "c04", "code", N, PY "def f(n):\n    return 1 if n <= 1 else n * f(n - 1)\nprint(f(5))", "120", NULL },
    { "c05", "code", N, PY "print(7 // 2 + 7 % 2)", "4", NULL },
    { "c06", "code", N, PY "s = 0\nfor i in range(1, 6):\n    if i % 2 == 0:\n        s += i\nprint(s)", "6", NULL },
    { "c07", "code", R, PY "print(\"abc\"[::-1])", "(^|[^a-z])cba([^a-z]|$)", NULL },
    { "c08", "code", R, CC "#include <stdio.h>\nint main(void) {\n    int a = 5;\n    int b = a++ + 2;\n"
                          "    printf(\"%d %d\\n\", a, b);\n    return 0;\n}", "(^|[^0-9])6 7([^0-9]|$)", NULL },
    { "c09", "code", N, PY "v = [3, 9, 2, 7]\nprint(max(v) - min(v))", "7", NULL },
    { "c10", "code", N, PY "d = {\"a\": 1, \"b\": 2}\nd[\"c\"] = d[\"a\"] + d[\"b\"]\nprint(sum(d.values()))", "6", NULL },
    { "c11", "code", N, PY "print(2 ** 3 ** 2)", "512", NULL },
    { "c12", "code", N, PY "words = \"the quick brown fox\".split()\nprint(len(max(words, key=len)))", "5", NULL },
    { "c13", "code", N, JS "console.log([1, 2, 3].map(x => x * 2).reduce((a, b) => a + b, 0));", "12", NULL },
    { "c14", "code", N, CC "#include <stdio.h>\nint main(void) {\n    unsigned char c = 250;\n    c += 10;\n"
                          "    printf(\"%d\\n\", c);\n    return 0;\n}", "4", NULL },

    /* logic puzzles */
    { "l01", "logic", R, "Alice is older than Bob. Bob is older than Carol. Who is the youngest?", "carol", NULL },
    { "l02", "logic", R, "All bloops are razzies and all razzies are lazzies. Are all bloops definitely lazzies? "
                         "Answer yes or no.", "^[^a-z]*yes([^a-z]|$)", NULL },
    { "l03", "logic", N, "A farmer has 17 sheep. All but 9 run away. How many sheep are left?", "9", NULL },
    { "l04", "logic", N, "In a row of 5 houses, the red house is immediately to the left of the green house, "
                         "and the green house is the fourth house from the left. Counting from the left, "
                         "which position is the red house?", "3", NULL },
    { "l05", "logic", R, "If today is Wednesday, what day of the week will it be 10 days from now?", "saturday", NULL },
    { "l06", "logic", N, "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. "
                         "How much does the ball cost, in cents?", "5", NULL },
    { "l07", "logic", N, "How many times does the digit 7 appear when you write all the integers from 1 to 100?", "20", NULL },
    { "l08", "logic", R, "Three boxes are labeled 'apples', 'oranges' and 'mixed', and every label is wrong. "
                         "You draw one fruit from the box labeled 'mixed' and it is an apple. What does the box "
                         "labeled 'oranges' contain: apples, oranges or mixed fruit?", "mixed", NULL },
    { "l09", "logic", N, "If 5 machines make 5 widgets in 5 minutes, how many minutes do 100 machines need "
                         "to make 100 widgets?", "5", NULL },
    { "l10", "logic", N, "A snail at the bottom of a 10 meter well climbs 3 meters every day and slips back "
                         "2 meters every night. On which day does it reach the top?", "8", NULL },
    { "l11", "logic", C, "Which is heavier: a kilogram of feathers or a kilogram of iron?\n"
                         "A) the feathers\nB) the iron\nC) they weigh the same", "C", NULL },
    { "l12", "logic", N, "Tom has 3 sisters. Each of his sisters has 2 brothers. How many brothers does Tom have?", "1", NULL },

    /* multiple choice on facts */
    { "f01", "facts", C, "What is the capital of Australia?\nA) Sydney\nB) Canberra\nC) Melbourne\nD) Perth", "B", NULL },
    { "f02", "facts", C, "What is the chemical symbol for gold?\nA) Ag\nB) Gd\nC) Au\nD) Go", "C", NULL },
    { "f03", "facts", C, "Which planet is closest to the Sun?\nA) Venus\nB) Mercury\nC) Mars\nD) Earth", "B", NULL },
    { "f04", "facts", C, "Who wrote the Divine Comedy?\nA) Petrarch\nB) Boccaccio\nC) Dante Alighieri\nD) Machiavelli", "C", NULL },
    { "f05", "facts", C, "At sea level, water boils at how many degrees Celsius?\nA) 90\nB) 100\nC) 110\nD) 120", "B", NULL },
    { "f06", "facts", C, "Which is the largest ocean on Earth?\nA) Atlantic\nB) Indian\nC) Arctic\nD) Pacific", "D", NULL },
    { "f07", "facts", C, "How many bits are in a byte?\nA) 4\nB) 8\nC) 16\nD) 32", "B", NULL },
    { "f08", "facts", C, "Who developed the general theory of relativity?\nA) Isaac Newton\nB) Niels Bohr\n"
                         "C) Albert Einstein\nD) James Clerk Maxwell", "C", NULL },
    { "f09", "facts", C, "Which gas do plants take in for photosynthesis?\nA) Oxygen\nB) Nitrogen\n"
                         "C) Carbon dioxide\nD) Helium", "C", NULL },
    { "f10", "facts", C, "In which year did World War II end?\nA) 1918\nB) 1939\nC) 1945\nD) 1950", "C", NULL },
    { "f11", "facts", C, "In which language is the Linux kernel mainly written?\nA) C\nB) Java\nC) Python\nD) Haskell", "A", NULL },
    { "f12", "facts", C, "What is the smallest prime number?\nA) 0\nB) 1\nC) 2\nD) 3", "C", NULL },
    { "f13", "facts", C, "What does the HTTP status code 404 mean?\nA) Internal server error\nB) Not found\n"
                         "C) Moved permanently\nD) Unauthorized", "B", NULL },
    { "f14", "facts", C, "Which element has atomic number 1?\nA) Helium\nB) Hydrogen\nC) Oxygen\nD) Carbon", "B", NULL },
    { "f15", "facts", C, "Which is the longest river in South America?\nA) Parana\nB) Orinoco\nC) Amazon\nD) Magdalena", "C", NULL },
    { "f16", "facts", C, "How many sides does a hexagon have?\nA) 5\nB) 6\nC) 7\nD) 8", "B", NULL },

    /* tool calls: exactly one DSML call with these arguments */
    { "t01", "tools", T, "What's the weather in Paris right now? Use celsius.", "get_weather",
      "{\"city\": \"Paris\", \"unit\": \"celsius\"}" },
    { "t02", "tools", T, "Convert 250 US dollars to euros.", "convert_currency",
      "{\"amount\": 250, \"from\": \"USD\", \"to\": \"EUR\"}" },
    { "t03", "tools", T, "Put a meeting called 'Budget review' in my calendar on 2026-03-14, lasting 45 minutes.",
      "create_event", "{\"title\": \"Budget review\", \"date\": \"2026-03-14\", \"duration_minutes\": 45}" },
    { "t04", "tools", T, "Email bob@example.com with the subject 'Lunch' and the body 'See you at noon.'",
      "send_email", "{\"to\": \"bob@example.com\", \"subject\": \"Lunch\", \"body\": \"See you at noon.\"}" },
    { "t05", "tools", T, "Find at most 5 files matching the pattern *.c", "search_files",
      "{\"pattern\": \"*.c\", \"max_results\": 5}" },
    { "t06", "tools", T, "What is the weather in Tokyo? I want it in fahrenheit.", "get_weather",
      "{\"city\": \"Tokyo\", \"unit\": \"fahrenheit\"}" },
    { "t07", "tools", T, "How many Japanese yen is 99.5 euros?", "convert_currency",
      "{\"amount\": 99.5, \"from\": \"EUR\", \"to\": \"JPY\"}" },
    { "t08", "tools", T, "Add 'Dentist' to my calendar on 2026-07-01 for 30 minutes.", "create_event",
      "{\"title\": \"Dentist\", \"date\": \"2026-07-01\", \"duration_minutes\": 30}" },
};

const int ev_n_questions = (int)(sizeof ev_questions / sizeof ev_questions[0]);

const char ev_tools_json[] =
"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather in a city.\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, "
"\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\", \"unit\"]}}}, "
"{\"type\": \"function\", \"function\": {\"name\": \"convert_currency\", \"description\": \"Convert an amount between currencies.\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {\"amount\": {\"type\": \"number\"}, "
"\"from\": {\"type\": \"string\", \"description\": \"ISO 4217 code, upper case (USD)\"}, "
"\"to\": {\"type\": \"string\", \"description\": \"ISO 4217 code, upper case (EUR)\"}}, \"required\": [\"amount\", \"from\", \"to\"]}}}, "
"{\"type\": \"function\", \"function\": {\"name\": \"create_event\", \"description\": \"Add an event to the user's calendar.\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {\"title\": {\"type\": \"string\"}, "
"\"date\": {\"type\": \"string\", \"description\": \"YYYY-MM-DD\"}, \"duration_minutes\": {\"type\": \"integer\"}}, "
"\"required\": [\"title\", \"date\", \"duration_minutes\"]}}}, "
"{\"type\": \"function\", \"function\": {\"name\": \"send_email\", \"description\": \"Send an email.\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {\"to\": {\"type\": \"string\"}, \"subject\": {\"type\": \"string\"}, "
"\"body\": {\"type\": \"string\"}}, \"required\": [\"to\", \"subject\", \"body\"]}}}, "
"{\"type\": \"function\", \"function\": {\"name\": \"search_files\", \"description\": \"Find files by glob pattern.\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {\"pattern\": {\"type\": \"string\"}, "
"\"max_results\": {\"type\": \"integer\"}}, \"required\": [\"pattern\"]}}}]";
